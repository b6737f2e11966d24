//! Files a run creates and removes itself (an output's temporary file, a
//! CSR cache being written, a generated array, a spill file), removed too
//! when the process is interrupted: SIGINT (Ctrl-C), SIGTERM or SIGHUP
//! would otherwise end it before any destructor runs, leaving them
//! behind (a spill file can hold tens of gigabytes).
//!
//! [`install`] blocks those signals in the calling thread, so in every
//! thread started after it, and starts one thread that waits for them
//! (`sigwait`): no code runs inside a signal handler. On a signal it
//! removes the files [`register`]ed and not yet [`unregister`]ed, then
//! lets the signal end the process the default way, so that a shell or a
//! parent sees it killed by that signal (a script stops on Ctrl-C). A
//! signal the process was started ignoring (`nohup`, a background job)
//! is left ignored.
//!
//! [`create`] makes such a file: a name of its own beside its destination,
//! created new (never a file or link already there), registered.
//! [`CreatedDirs`] makes a folder and its missing parents, registered
//! too: an interruption removes them where they are empty (it never
//! removes what is in a folder but the registered files). [`hold`] defers
//! the cleanup across a sequence that must finish whole.
//! [`register_child`] names a child process (a `--processes` member)
//! that the signal is handed on to, and waited for, before this process
//! ends: so that, when it has ended, its children have removed their own
//! files too.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Each child, and the folder its spill files go to, if any.
static CHILDREN: Mutex<Vec<(libc::pid_t, Option<PathBuf>)>> = Mutex::new(Vec::new());

/// How long an interrupted process waits for the children it handed the
/// signal to before it kills them.
const CHILDREN_GRACE: Duration = Duration::from_secs(10);

fn children() -> std::sync::MutexGuard<'static, Vec<(libc::pid_t, Option<PathBuf>)>> {
    CHILDREN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Marks child process `pid` (one this process started and has not yet
/// waited for) to be handed an interruption's signal and waited for.
/// `spill_folder`: where its spill stores' files go; what one it was
/// made to end (killed after the grace) left there is removed
/// ([`crate::spill::remove_leftovers`]).
pub fn register_child(pid: u32, spill_folder: Option<PathBuf>) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        children().push((pid, spill_folder));
    }
}

/// Forgets child `pid` (waited for).
pub fn unregister_child(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        children().retain(|(p, _)| *p != pid);
    }
}

/// Hands `signal` to the registered children still running and waits
/// for them to end, at most [`CHILDREN_GRACE`]; those still running then
/// are killed. While they end, a child is not reaped here (`WNOWAIT`:
/// its `std::process::Child` may still wait for it), and one that has
/// ended, or any pid no longer this process's child, is never signalled;
/// once all have ended, those not yet reaped are, and what spill files
/// each left in its folder (it was killed, or ended another way without
/// closing its stores) are removed.
fn stop_children(signal: libc::c_int) {
    stop_children_within(signal, CHILDREN_GRACE)
}

/// [`stop_children`] with a grace of `grace`.
fn stop_children_within(signal: libc::c_int, grace: Duration) {
    let running = |pid: libc::pid_t| {
        // SAFETY: siginfo_t is plain data that waitid fills; it looks at
        // one child without blocking and without reaping it.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) == 0
                && info.si_pid() == 0
        }
    };
    let pids: Vec<libc::pid_t> = children().iter().map(|(pid, _)| *pid).collect();
    let mut left: Vec<libc::pid_t> = pids.into_iter().filter(|&p| running(p)).collect();
    for &pid in &left {
        // SAFETY: a plain syscall to a running child of this process.
        unsafe { libc::kill(pid, signal) };
    }
    let deadline = std::time::Instant::now() + grace;
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        left.retain(|&pid| running(pid));
    }
    for pid in left {
        // SAFETY: as above; then waits for the child killed to end, still
        // without reaping it.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            );
        }
    }
    // Ended, each is reaped now, where `main` (parked from here on,
    // [`park_if_interrupted`]) has not: this process ends next, and a
    // child it leaves unreaped is left to whatever adopts it.
    for (pid, spill_folder) in children().iter() {
        // SAFETY: reaps one ended child without blocking; a pid that is
        // not this process's child is refused (ECHILD).
        unsafe { libc::waitpid(*pid, std::ptr::null_mut(), libc::WNOHANG) };
        if let Some(folder) = spill_folder {
            crate::spill::remove_leftovers(folder, *pid as u32);
        }
    }
}

/// Set once an interruption's cleanup has begun: the process ends by
/// the signal, not by `main` returning meanwhile.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Where an interruption's cleanup has begun, waits here for the process
/// to end by its signal (the cleanup holds [`hold`]'s lock until then),
/// so that a command that ends meanwhile (its children ended by the same
/// signal) neither says a failure of its own nor exits with another
/// status. Called by `main` before it says an error and before it
/// returns.
pub fn park_if_interrupted() {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        let _held = hold();
    }
}

fn files() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    FILES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new file beside `destination`, for writing then renaming over it:
/// hidden, named by the destination, the process and a count (by the
/// process and the count alone where that name would be too long),
/// created with `O_EXCL` so that nothing already there (a file, a link)
/// is opened, and [`register`]ed; open to read too, so that what was
/// written can be copied from it. The caller renames or removes it, then
/// [`unregister`]s it.
pub fn create(destination: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let mut name = std::ffi::OsString::from(".");
        name.push(destination.file_name().unwrap_or_default());
        name.push(format!(".tmp{pid}-{n}"));
        if name.len() > 255 {
            name = format!(".fateplan-{pid}-{n}.tmp").into();
        }
        let path = destination.with_file_name(name);
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                register(&path);
                return Ok((path, file));
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
}

/// The folders [`CreatedDirs::create`] made for a folder: the folder and
/// the parents it lacked, deepest first. Each is [`register`]ed from its
/// creation until [`CreatedDirs::remove_empty`] or [`CreatedDirs::keep`];
/// dropped without `keep`, they are removed where empty.
#[derive(Debug, Default)]
pub struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    /// Creates `dir` and its missing parents one level at a time, and
    /// records the levels this call created: a folder that was already
    /// there (or that another process made meanwhile), or one that a
    /// `..` or `.` in the path names, is not recorded, so never removed.
    pub fn create(dir: &Path) -> std::io::Result<CreatedDirs> {
        let mut created = CreatedDirs::default();
        let mut level = PathBuf::new();
        for component in dir.components() {
            level.push(component);
            if !matches!(component, std::path::Component::Normal(_)) {
                continue;
            }
            // An interruption between the two would leave the folder.
            let held = hold();
            match std::fs::create_dir(&level) {
                Ok(()) => {
                    register(&level);
                    drop(held);
                    created.0.insert(0, level.clone());
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                // `created` is dropped: what it made goes again.
                Err(error) => return Err(error),
            }
        }
        // A file (not a folder) already there at `dir` itself.
        if !dir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "exists and is not a directory",
            ));
        }
        Ok(created)
    }

    /// Removes the folders created, deepest first, each only if it is
    /// empty (other files there are not ours), stopping at the first
    /// that is not.
    pub fn remove_empty(&mut self) {
        let mut removing = true;
        for dir in std::mem::take(&mut self.0) {
            removing = removing && std::fs::remove_dir(&dir).is_ok();
            unregister(&dir);
        }
    }

    /// Keeps the folders created: an interruption no longer removes them.
    pub fn keep(mut self) {
        for dir in std::mem::take(&mut self.0) {
            unregister(&dir);
        }
    }
}

impl Drop for CreatedDirs {
    fn drop(&mut self) {
        self.remove_empty();
    }
}

/// Holds off an interruption's cleanup while it lives ([`hold`]).
pub struct Hold(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

static HELD: Mutex<()> = Mutex::new(());

/// Defers an interruption's cleanup (and so the process's end by the
/// signal) until the returned guard drops: for a short sequence that
/// must finish whole, as renaming a dataset's files into place, which
/// stopped half way would leave old and new arrays side by side.
pub fn hold() -> Hold {
    Hold(HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// Marks `path` for removal if the process is interrupted.
pub fn register(path: &Path) {
    files().push(path.to_path_buf());
}

/// Forgets `path` (renamed into place, or removed): an interruption no
/// longer removes it.
pub fn unregister(path: &Path) {
    let mut files = files();
    if let Some(at) = files.iter().rposition(|p| p == path) {
        // In order: the cleanup walks them latest first.
        files.remove(at);
    }
}

/// The signals that remove the registered files.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Starts the thread that removes the registered files on an
/// interruption. Call it first thing, before any other thread starts
/// (threads started earlier keep the signals unblocked, and one of them
/// could take a signal the default way). Where the signals cannot be
/// blocked, nothing changes: they end the process as before.
pub fn install() {
    // SAFETY: sigset_t and sigaction are plain data that sigemptyset and
    // sigaction initialise; pthread_sigmask changes only this thread's
    // mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in SIGNALS {
            // A signal ignored from the start stays ignored: blocked, it
            // would still reach sigwait.
            let mut action: libc::sigaction = std::mem::zeroed();
            let ignored = libc::sigaction(signal, std::ptr::null(), &mut action) == 0
                && action.sa_sigaction == libc::SIG_IGN;
            if !ignored {
                libc::sigaddset(&mut set, signal);
            }
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        set
    };
    let started = std::thread::Builder::new()
        .name("fateplan-signals".into())
        .spawn(move || loop {
            let mut signal: libc::c_int = 0;
            // SAFETY: waits on a set built above; writes `signal`.
            if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                continue;
            }
            // After any sequence that must finish whole (`hold`), and
            // held until the process ends: nothing registered after.
            let _held = HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            // The children first: they remove their own files, from the
            // folders this process made for them.
            stop_children(signal);
            let files = files();
            // The files, then the folders, latest first (a folder is
            // registered before the folders it holds): each folder is
            // removed only where that left it empty.
            for path in files.iter().rev() {
                let _ = std::fs::remove_file(path);
            }
            for path in files.iter().rev() {
                let _ = std::fs::remove_dir(path);
            }
            // The default action, unblocked in this thread, then the
            // signal again: the process ends killed by it.
            // SAFETY: resets one signal's action and this thread's mask.
            unsafe {
                libc::signal(signal, libc::SIG_DFL);
                let mut one: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut one);
                libc::sigaddset(&mut one, signal);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
                libc::raise(signal);
                libc::_exit(128 + signal);
            }
        });
    if started.is_err() {
        // No thread to take them: unblocked again, the default way.
        // SAFETY: as above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_files_are_forgotten_once_unregistered() {
        let (a, b) = (Path::new("/nonexistent/a"), Path::new("/nonexistent/b"));
        register(a);
        register(b);
        unregister(a);
        assert!(!files().iter().any(|p| p == a));
        assert!(files().iter().any(|p| p == b));
        unregister(b);
        assert!(!files().iter().any(|p| p == b));
    }

    /// A child that ignores the signal is killed after the grace, and
    /// the spill file it left in its folder goes (with the folder, then
    /// empty); one that ends by the signal is waited for. Another
    /// process's file in a folder stays.
    #[test]
    // `stop_children` reaps them, as it does a launcher's members.
    #[allow(clippy::zombie_processes)]
    fn a_child_killed_after_the_grace_leaves_no_spill_file() {
        let root = tempfile::tempdir().unwrap();
        let start = |script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .spawn()
                .unwrap()
        };
        // `exec`: the ignored signal stays ignored in `sleep`.
        let stubborn = start("trap '' TERM; exec sleep 60");
        let willing = start("exec sleep 60");
        // The shell has set its trap once it has exec'd: wait for that.
        let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while [stubborn.id(), willing.id()]
            .iter()
            .any(|&pid| exe(pid).is_none_or(|e| !e.to_string_lossy().contains("sleep")))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the children never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let folders = [root.path().join("device0"), root.path().join("device1")];
        for (folder, pid) in folders.iter().zip([stubborn.id(), willing.id()]) {
            std::fs::create_dir(folder).unwrap();
            std::fs::write(folder.join(format!("fateplan-spill-{pid}-0.bin")), b"x").unwrap();
            std::fs::write(folder.join("fateplan-spill-1-0.bin"), b"x").unwrap();
            register_child(pid, Some(folder.clone()));
        }
        let started = std::time::Instant::now();
        stop_children_within(libc::SIGTERM, Duration::from_millis(300));
        assert!(started.elapsed() >= Duration::from_millis(300));
        // Both ended and reaped (by `stop_children`, so not by `wait`).
        for pid in [stubborn.id(), willing.id()] {
            assert!(exe(pid).is_none(), "{pid} still runs");
        }
        for (folder, pid) in folders.iter().zip([stubborn.id(), willing.id()]) {
            assert!(!folder.join(format!("fateplan-spill-{pid}-0.bin")).exists());
            assert!(folder.join("fateplan-spill-1-0.bin").exists());
            unregister_child(pid);
        }
        std::fs::remove_file(folders[0].join("fateplan-spill-1-0.bin")).unwrap();
        std::fs::write(
            folders[0].join(format!("fateplan-spill-{}-3.bin", 77)),
            b"x",
        )
        .unwrap();
        assert!(crate::spill::remove_leftovers(&folders[0], 77));
        assert!(!folders[0].exists(), "emptied, the folder goes");
    }

    #[test]
    fn created_folders_are_registered_until_removed_or_kept() {
        let root = tempfile::tempdir().unwrap();
        let registered = |p: &Path| files().iter().any(|q| q == p);
        let (outer, inner) = (root.path().join("a"), root.path().join("a/b"));
        let mut created = CreatedDirs::create(&inner).unwrap();
        assert!(inner.is_dir() && registered(&outer) && registered(&inner));
        // Outermost first: an interruption removes the deepest first.
        let at = |p: &Path| files().iter().rposition(|q| q == p);
        assert!(at(&outer) < at(&inner));
        created.remove_empty();
        assert!(!outer.exists() && !registered(&outer) && !registered(&inner));

        // A folder holding a file of someone else's stays; dropped, the
        // record removes what it made.
        let created = CreatedDirs::create(&inner).unwrap();
        std::fs::write(outer.join("theirs"), b"x").unwrap();
        drop(created);
        assert!(!inner.exists() && outer.join("theirs").exists());
        assert!(!registered(&outer));

        // Kept: `outer` was there already, so only `inner` was made.
        let created = CreatedDirs::create(&inner).unwrap();
        assert!(!registered(&outer) && registered(&inner));
        created.keep();
        assert!(inner.is_dir() && !registered(&inner));

        // A folder that a `..` names, or that was there, is not ours.
        let existing = root.path().join("existing");
        std::fs::create_dir(&existing).unwrap();
        let through = root.path().join("new/../existing");
        drop(CreatedDirs::create(&through).unwrap());
        assert!(existing.is_dir() && !root.path().join("new").exists());

        // A file where the folder should be is refused, as before.
        let file = root.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let refused = CreatedDirs::create(&file).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::NotADirectory);
        assert!(file.is_file());
    }
}
