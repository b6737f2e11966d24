//! `fateplan train --devices K --processes`: each device a process of its
//! own. The launcher (the `train` process) plans, serves a hub on the
//! loopback interface, and starts K members (`fateplan member`, hidden),
//! each given its job on its standard input: a line of JSON, then the
//! launcher's min-cut partitioning where the shares are min-cut ones
//! (nothing is written to disk for them, so nothing is left behind when
//! the launcher is killed). A member joins the
//! hub, shares the graph out as the launcher did, takes its own share,
//! trains it with the launcher's plan, and hands its outcome to the hub as
//! it leaves. The launcher gathers the outcomes into the run's report.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use fateplan::planner::plan::{Budgets, Plan};
use fateplan::runtime::collective::{Collective, Hub, TcpMember};
use fateplan::runtime::dataset::Dataset;
use fateplan::runtime::exec::{ExecError, ExecOptions, SsdTier};
use fateplan::runtime::share::{decode_owner, encode_owner, prepare_share_reading};
use fateplan::runtime::train::{self, EpochStats, MemberOutcome};
use serde::{Deserialize, Serialize};

use crate::train::TrainArgs;

/// How long the members have to start and join the hub.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);

/// What a member process is told on its standard input.
#[derive(Serialize, Deserialize)]
struct Job {
    args: TrainArgs,
    rank: usize,
    /// The hub's address.
    hub: String,
    /// Compute threads of this member.
    threads: usize,
    /// The plan, as JSON.
    plan: String,
    /// The run's arenas (`None`: the plan's).
    budgets: Option<Budgets>,
    /// Bytes of this member's SSD tier, when the run gives a spill folder.
    ssd_bytes: u64,
    /// Whether the member divides each of its feature rows by its sum
    /// (the launcher found that no feature of the graph is negative).
    rows_sum_to_one: bool,
    /// Whether the launcher's min-cut partitioning of the graph onto the
    /// devices follows the job's line (`share::encode_owner`), for min-cut
    /// shares.
    owner_follows: bool,
}

/// What a member hands the hub as it leaves.
#[derive(Serialize, Deserialize)]
struct Handed {
    outcome: MemberOutcome,
    /// Its spill store's I/O mode, where it opened one.
    #[serde(default)]
    ssd_tier: Option<String>,
}

/// What the members brought back.
pub struct Launched {
    pub outcomes: Vec<MemberOutcome>,
    /// Each member's spill store's I/O mode, where it opened one.
    pub ssd_tiers: Vec<Option<String>>,
}

/// A member's process and what it wrote on its standard error.
struct Started {
    child: Child,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// Where it failed, its error as `--json` says one
    /// ([`crate::cli::error_document`]); nothing else.
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Started {
    fn drop(&mut self) {
        // Waited for by now (each path out of `launch` waits or kills).
        fateplan::runtime::cleanup::unregister_child(self.child.id());
    }
}

impl Started {
    fn stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }

    /// Its error's document, once its process has ended; `None` where it
    /// wrote none.
    fn error_document(&mut self) -> Option<serde_json::Value> {
        let text = self.stdout.take().and_then(|h| h.join().ok())?;
        serde_json::from_str(&text).ok()
    }
}

/// A member that failed ([`ExecError::MemberFailed`], its source), with
/// its error's document where it wrote one: `train --processes --json`
/// gives it as `member_error`, its kind and figures as a run of its own
/// would give.
#[derive(Debug, thiserror::Error)]
#[error("{failed}")]
pub(crate) struct MemberError {
    #[source]
    failed: ExecError,
    pub(crate) document: serde_json::Value,
}

/// Reads `pipe` to its end on a thread of its own.
fn read_to_end(
    pipe: Option<impl Read + Send + 'static>,
) -> Option<std::thread::JoinHandle<String>> {
    pipe.map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    })
}

/// Starts one member process per device of `args`, serves their hub, and
/// waits for them all.
pub fn launch(
    args: &TrainArgs,
    plan: &Plan,
    budgets: Option<Budgets>,
    ssd_bytes: u64,
    rows_sum_to_one: bool,
    owner: Option<&[u32]>,
) -> Result<Launched> {
    let k = args.devices() as usize;
    // The partitioning: the members share the graph out without
    // partitioning it again.
    let owner_bytes = owner.map(|owner| encode_owner(owner, k as u32));
    let hub = Hub::bind("127.0.0.1:0", k)?;
    let addr = hub.local_addr()?;
    // This process's pool: --threads, or rayon's default (every core, or
    // RAYON_NUM_THREADS), as the note on the threads says.
    let threads = rayon::current_num_threads();
    let exe = std::env::current_exe().context("finding this program to start the members")?;
    let plan_json = plan.to_json();
    let mut members: Vec<Started> = Vec::with_capacity(k);
    for rank in 0..k {
        let job = Job {
            args: args.clone(),
            rank,
            hub: addr.to_string(),
            threads: train::member_threads(threads, k, rank),
            plan: plan_json.clone(),
            budgets,
            ssd_bytes,
            rows_sum_to_one,
            owner_follows: owner_bytes.is_some(),
        };
        let spawned = Command::new(&exe)
            .arg("member")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => {
                let folder = args
                    .spill_dir
                    .as_deref()
                    .map(|d| member_spill_folder(d, rank));
                fateplan::runtime::cleanup::register_child(child.id(), folder);
                child
            }
            Err(e) => {
                // Those started see the hub close.
                drop(hub);
                stop_all(&mut members);
                return Err(
                    anyhow!(e).context(format!("starting member {rank} ({})", exe.display()))
                );
            }
        };
        let stderr = read_to_end(child.stderr.take());
        let stdout = read_to_end(child.stdout.take());
        let mut started = Started {
            child,
            stderr,
            stdout,
        };
        let sent = started
            .child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("member {rank}'s standard input"))
            .and_then(|mut stdin| {
                // Compact JSON holds no line break.
                let mut line = serde_json::to_vec(&job)?;
                line.push(b'\n');
                stdin.write_all(&line)?;
                if let Some(bytes) = &owner_bytes {
                    stdin.write_all(bytes)?;
                }
                Ok(())
            });
        members.push(started);
        if let Err(e) = sent {
            drop(hub);
            stop_all(&mut members);
            return Err(e.context(format!("giving member {rank} its job")));
        }
    }
    let served = hub.serve(JOIN_TIMEOUT, &mut || {
        for (rank, member) in members.iter_mut().enumerate() {
            if let Ok(Some(status)) = member.child.try_wait() {
                return Err(ExecError::MemberFailed {
                    rank,
                    why: format!(
                        "its process exited ({status}) before joining: {}",
                        member.stderr().trim()
                    ),
                });
            }
        }
        Ok(())
    });
    let results = match served {
        Ok(results) => results,
        Err(e) => {
            let ended = stop_all(&mut members);
            remove_spill_leftovers(args.spill_dir.as_deref(), &members);
            // A member killed by a signal could not say why it stopped,
            // and one that panicked said it on its standard error only.
            let mut said = Vec::new();
            for (rank, m) in members.iter_mut().enumerate() {
                use std::os::unix::process::ExitStatusExt;
                let signal = m.child.try_wait().ok().flatten().and_then(|s| s.signal());
                match signal {
                    Some(_) if ended.contains(&rank) => said.push(format!(
                        "member {rank} was ended by the launcher after the group stopped"
                    )),
                    Some(signal) => said.push(format!(
                        "member {rank}'s process was killed by signal {signal}"
                    )),
                    None => {}
                }
                let stderr = m.stderr();
                if let Some(panic) = stderr.lines().find(|l| l.contains("panicked")) {
                    said.push(format!("member {rank}: {}", panic.trim()));
                }
            }
            // The member that failed said why in its own document too.
            let e = match e {
                ExecError::MemberFailed { rank, .. } => {
                    match members.get_mut(rank).and_then(Started::error_document) {
                        Some(document) => anyhow::Error::new(MemberError {
                            failed: e,
                            document,
                        }),
                        None => e.into(),
                    }
                }
                e => e.into(),
            };
            if said.is_empty() {
                return Err(e);
            }
            return Err(e.context(said.join("; ")));
        }
    };
    for rank in 0..members.len() {
        let status = members[rank]
            .child
            .wait()
            .with_context(|| format!("waiting for member {rank}"))?;
        if !status.success() {
            let said = members[rank].stderr();
            // The others finish (or are stopped) before the run ends, so
            // that their spill stores close.
            stop_all(&mut members[rank + 1..]);
            remove_spill_leftovers(args.spill_dir.as_deref(), &members);
            bail!(
                "member {rank}'s process exited ({status}) after leaving the group: {}",
                said.trim()
            );
        }
    }
    let mut outcomes = Vec::with_capacity(k);
    let mut ssd_tiers = Vec::with_capacity(k);
    for (rank, bytes) in results.into_iter().enumerate() {
        let handed: Handed = serde_json::from_slice(&bytes)
            .with_context(|| format!("reading member {rank}'s outcome"))?;
        if handed.outcome.device.rank != rank {
            bail!(
                "member {rank} handed over device {}'s outcome",
                handed.outcome.device.rank
            );
        }
        outcomes.push(handed.outcome);
        ssd_tiers.push(handed.ssd_tier);
    }
    Ok(Launched {
        outcomes,
        ssd_tiers,
    })
}

/// Ends members that are still running after the group failed: the hub
/// told those it could; the others are killed after a grace period.
/// Returns the ranks it killed.
fn stop_all(members: &mut [Started]) -> Vec<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut killed = Vec::new();
    for (rank, member) in members.iter_mut().enumerate() {
        loop {
            match member.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = member.child.kill();
                    let _ = member.child.wait();
                    killed.push(rank);
                    break;
                }
            }
        }
    }
    killed
}

/// Removes what members that ended without closing their spill stores
/// (killed by a signal, by the launcher among them) left in `spill_dir`:
/// each one's files (`fateplan-spill-<its pid>-*.bin`) in its folder
/// `device<rank>`, and that folder where a file was removed from it and
/// it is then empty (a folder the user made stays). Called once every
/// member has ended; a member that closed its store left nothing.
fn remove_spill_leftovers(spill_dir: Option<&std::path::Path>, members: &[Started]) {
    let Some(dir) = spill_dir else { return };
    let pids: Vec<u32> = members.iter().map(|m| m.child.id()).collect();
    remove_leftovers_of(dir, &pids);
}

/// [`remove_spill_leftovers`] for the members of these pids, by rank
/// ([`fateplan::runtime::spill::remove_leftovers`] in each one's folder).
fn remove_leftovers_of(dir: &std::path::Path, pids: &[u32]) {
    for (rank, &pid) in pids.iter().enumerate() {
        fateplan::runtime::spill::remove_leftovers(&member_spill_folder(dir, rank), pid);
    }
}

/// Member `rank`'s spill folder in the run's `--spill-dir`.
fn member_spill_folder(dir: &std::path::Path, rank: usize) -> std::path::PathBuf {
    dir.join(format!("device{rank}"))
}

/// `fateplan member`: one device's process, started by `launch`.
pub fn run_member() -> Result<()> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("reading the job on standard input")?;
    let (job, owner) = read_job(&input)?;
    crate::cli::set_threads(Some(job.threads))?;
    let k = job.args.devices() as usize;
    let hub = job
        .hub
        .parse()
        .with_context(|| format!("the hub's address {:?}", job.hub))?;
    let member = Arc::new(TcpMember::join(hub, job.rank, k, JOIN_TIMEOUT)?);
    match train_member(&job, owner, member.clone()) {
        Ok(handed) => {
            member.leave_with(&serde_json::to_vec(&handed)?)?;
            Ok(())
        }
        Err(e) => {
            // The launcher reads its document once this process has
            // ended (written first: the launcher stops the group when it
            // learns of the failure); the others learn why, in the words
            // the command line would give.
            let document = crate::cli::error_document(&e);
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{document}").and_then(|()| out.flush());
            member.abort(&crate::cli::error_chain(&e));
            Err(e)
        }
    }
}

/// The job on a member's standard input (a line of JSON) and the bytes of
/// the partitioning that follow it where the job says so.
fn read_job(input: &[u8]) -> Result<(Job, Option<&[u8]>)> {
    const STARTED: &str = "fateplan member is started by train --processes";
    let end = input
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(input.len());
    let job: Job = serde_json::from_slice(&input[..end])
        .with_context(|| format!("the job on standard input ({STARTED})"))?;
    let rest = input.get(end + 1..).unwrap_or(&[]);
    match (job.owner_follows, rest.is_empty()) {
        (true, true) => bail!("standard input: the job's partitioning is missing ({STARTED})"),
        (false, false) => bail!(
            "standard input: {} bytes follow a job that has no partitioning ({STARTED})",
            rest.len()
        ),
        (true, false) => Ok((job, Some(rest))),
        (false, true) => Ok((job, None)),
    }
}

fn train_member(job: &Job, owner: Option<&[u8]>, member: Arc<TcpMember>) -> Result<Handed> {
    let args = &job.args;
    let hyper = crate::train::hyper(args)?;
    let plan = Plan::from_json(&job.plan, "the launcher's plan")?;
    // This member's share only, and only its own feature rows are read:
    // K members hold one copy of the graph's rows between them. Each
    // reads every edge, a batch at a time, and holds its own rows' (a
    // planted graph's edges, drawn whole, are held whole while it does).
    let method = crate::train::share_method(args)?;
    let mut shared = {
        // The rows' source (a dataset's mapped x.npy) is closed once they
        // are read.
        let (dataset, rows, edges) = train::open_graph(&args.graph)?;
        let owner = match owner {
            Some(bytes) => Some(decode_owner(
                bytes,
                std::path::Path::new("the launcher's partitioning on standard input"),
                dataset.nodes,
                args.devices(),
            )?),
            None => None,
        };
        let features = dataset.features;
        let read = |ids: &[u64]| {
            let mut x = rows.rows(ids)?;
            if job.rows_sum_to_one {
                Dataset::normalize_rows(&mut x, features);
            }
            Ok(x)
        };
        let (k, p) = (args.devices(), args.partitions());
        prepare_share_reading(dataset, edges, &read, owner, &hyper, k, p, method, job.rank)?
    };
    train::check_shared_plan(&plan, &shared.workload)?;
    let Some(share) = shared.devices.pop().filter(|_| shared.devices.is_empty()) else {
        bail!("member {}: expected its one share", job.rank);
    };
    drop(shared);
    // Refused before its spill folder is made. Each process checks its
    // own share against the memory it sees.
    train::check_memory(&plan, &train::BackendChoice::Cpu, &[&share.input])?;
    let mut ssd_tier = None;
    let ssd = match &args.spill_dir {
        Some(dir) => {
            // The store creates (and on close removes) its folder; the
            // launcher, the spill folder.
            let sub = member_spill_folder(dir, job.rank);
            let store = train::open_spill(&sub, job.ssd_bytes, train::ssd_blocks(&plan), None)
                .with_context(|| format!("--spill-dir {}", dir.display()))?;
            ssd_tier = Some(store.mode().to_string());
            Some(store as Arc<dyn SsdTier>)
        }
        None => None,
    };
    let options = ExecOptions {
        budgets: job.budgets,
        // Every device's, as the devices on threads: each runs the same
        // code, so that the slowest device's iteration is not device 0's
        // for recording alone.
        trace: args.trace.is_some() || args.compare_simulated,
    };
    // The members report at the end, not per epoch.
    let mut outcome = train::train_member(
        share,
        hyper,
        Arc::new(plan),
        // A member's epochs are not shown (the launcher's bar is not
        // told them), so none is evaluated before the last.
        (args.epochs, 0),
        options,
        ssd,
        Box::new(member) as Box<dyn Collective>,
        &mut |_: &EpochStats| {},
    )?;
    outcome.device.process_peak_bytes = peak_resident_bytes();
    Ok(Handed { outcome, ssd_tier })
}

/// The most resident memory this process has held (`VmHWM` in
/// `/proc/self/status`), where the system says.
pub(crate) fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_peak_resident(&status)
}

/// `VmHWM` of a `/proc/PID/status` text, in bytes.
fn parse_peak_resident(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut words = line["VmHWM:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(owner_follows: bool) -> Job {
        #[derive(clap::Parser)]
        struct Line {
            #[command(flatten)]
            args: TrainArgs,
        }
        let line = <Line as clap::Parser>::parse_from([
            "train",
            "--graph",
            "planted:nodes=40,classes=2,features=4,seed=1",
            "--devices",
            "2",
        ]);
        Job {
            args: line.args,
            rank: 1,
            hub: "127.0.0.1:1".into(),
            threads: 1,
            plan: "{}".into(),
            budgets: None,
            ssd_bytes: 0,
            rows_sum_to_one: true,
            owner_follows,
        }
    }

    fn input(job: &Job, after: &[u8]) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(job).unwrap();
        bytes.push(b'\n');
        bytes.extend_from_slice(after);
        bytes
    }

    #[test]
    fn a_job_line_carries_the_partitioning_after_it_where_it_says_so() {
        let owner = [0u32, 1, 1, 0, 1];
        let bytes = encode_owner(&owner, 2);
        // The partitioning's bytes hold line breaks (vertex counts, 10).
        let with = input(&job(true), &encode_owner(&[1; 10], 2));
        let (read, after) = read_job(&with).unwrap();
        assert_eq!((read.rank, read.hub.as_str()), (1, "127.0.0.1:1"));
        let name = std::path::Path::new("stdin");
        assert_eq!(decode_owner(after.unwrap(), name, 10, 2).unwrap(), [1; 10]);
        let with = input(&job(true), &bytes);
        assert_eq!(
            decode_owner(read_job(&with).unwrap().1.unwrap(), name, 5, 2).unwrap(),
            owner
        );
        let without = input(&job(false), &[]);
        assert!(read_job(&without).unwrap().1.is_none());
        // The job alone, without its line break, is read too.
        let bare = serde_json::to_vec(&job(false)).unwrap();
        assert!(read_job(&bare).unwrap().1.is_none());
        let error = |bytes: &[u8]| format!("{:#}", read_job(bytes).err().unwrap());
        assert!(
            error(&input(&job(true), &[])).contains("the job's partitioning is missing"),
            "{}",
            error(&input(&job(true), &[]))
        );
        let extra = error(&input(&job(false), &bytes));
        assert!(
            extra.contains(&format!("{} bytes follow a job", bytes.len())),
            "{extra}"
        );
        let garbled = error(b"{\"rank\": 1}\n");
        assert!(
            garbled.contains("started by train --processes"),
            "{garbled}"
        );
    }

    #[test]
    fn leftovers_are_removed_but_not_a_file_a_live_store_holds() {
        let dir = std::env::temp_dir().join(format!("fateplan-leftovers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for rank in 0..2 {
            std::fs::create_dir_all(dir.join(format!("device{rank}"))).unwrap();
        }
        // Member 0 (pid 7) left a file no store holds; member 1's pid (8)
        // is now another run's, whose store holds its file.
        let left = dir.join("device0/fateplan-spill-7-0.bin");
        std::fs::write(&left, b"left").unwrap();
        let held = dir.join("device1/fateplan-spill-8-0.bin");
        std::fs::write(&held, b"held").unwrap();
        let holder = std::fs::File::open(&held).unwrap();
        holder.lock().unwrap();
        // Another pid's file in member 1's folder stays too.
        let other = dir.join("device1/fateplan-spill-9-0.bin");
        std::fs::write(&other, b"other").unwrap();
        remove_leftovers_of(&dir, &[7, 8]);
        assert!(!left.exists() && !dir.join("device0").exists());
        assert!(held.exists() && other.exists());
        drop(holder);
        remove_leftovers_of(&dir, &[7, 8]);
        assert!(!held.exists() && other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_peak_resident_memory_is_read_in_kilobytes() {
        let status = "Name:\tfateplan\nVmPeak:\t  2000 kB\nVmHWM:\t    1536 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_peak_resident(status), Some(1536 * 1024));
        assert_eq!(parse_peak_resident("VmRSS:\t1000 kB\n"), None);
        assert_eq!(parse_peak_resident("VmHWM:\t12 pages\n"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_resident_bytes().is_some_and(|b| b > 0));
        }
    }
}
