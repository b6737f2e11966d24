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

use std::path::{Path, PathBuf};
use std::sync::Mutex;

static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn files() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    FILES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new file beside `destination`, for writing then renaming over it:
/// hidden, named by the destination, the process and a count (by the
/// process and the count alone where that name would be too long),
/// created with `O_EXCL` so that nothing already there (a file, a link)
/// is opened, and [`register`]ed. The caller renames or removes it, then
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

/// Marks `path` for removal if the process is interrupted.
pub fn register(path: &Path) {
    files().push(path.to_path_buf());
}

/// Forgets `path` (renamed into place, or removed): an interruption no
/// longer removes it.
pub fn unregister(path: &Path) {
    let mut files = files();
    if let Some(at) = files.iter().rposition(|p| p == path) {
        files.swap_remove(at);
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
            // Held until the process ends: nothing registered after.
            let files = files();
            for path in files.iter() {
                let _ = std::fs::remove_file(path);
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
}
