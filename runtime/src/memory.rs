//! The memory this process can still take, read where the kernel keeps
//! it, for the checks that refuse a graph before the allocation that
//! would end the process (`memory allocation of N bytes failed`).
//!
//! Four limits apply, and the least of them is the figure: the memory
//! the kernel says is available (`MemAvailable`), the address-space limit
//! (`ulimit -v`, `RLIMIT_AS`) less what the process maps already, the
//! data limit (`ulimit -d`, `RLIMIT_DATA`) less its data mappings, and
//! the limit of its cgroup v2 and those above it (`memory.max` less
//! `memory.current`). Each check asks [`available`], so that all of them
//! see the same limits.

use std::path::{Component, Path};

use crate::measure::host::{parse_meminfo, size_field};

/// Where the cgroup v2 hierarchy is mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Bytes of memory this process can still take, and the limit that
/// gives the figure, as an error says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    pub bytes: u64,
    pub source: String,
}

impl Available {
    /// Where `needed_bytes` is more than this: "at least X GiB in memory
    /// (`what`), more than the Y GiB available (the source)", for an
    /// error that says too what takes it and what would fit, and its
    /// figures.
    pub fn shortfall(&self, needed_bytes: u64, what: &str) -> Option<Shortfall> {
        (needed_bytes > self.bytes).then(|| {
            let (needed, available) = apart(needed_bytes, self.bytes);
            Shortfall {
                text: format!(
                    "at least {needed} in memory ({what}), more than the {available} available \
                     ({})",
                    self.source
                ),
                needed_bytes,
                available_bytes: self.bytes,
            }
        })
    }
}

/// More memory needed than a process can take ([`Available::shortfall`]):
/// what a refusal says of it, and the figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub text: String,
    pub needed_bytes: u64,
    pub available_bytes: u64,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Shortfall {
    /// The same figures, said as `say` words it from the text.
    pub fn said(self, say: impl FnOnce(&str) -> String) -> Shortfall {
        Shortfall {
            text: say(&self.text),
            ..self
        }
    }

    /// The refusal whose message is `message` (this shortfall and what
    /// would fit), with these figures.
    pub fn refusal(&self, message: String) -> OverMemory {
        OverMemory {
            message,
            needed_bytes: self.needed_bytes,
            available_bytes: self.available_bytes,
        }
    }
}

/// Work refused before it starts for want of memory (a workload to plan,
/// a graph to read or partition): its message, the bytes it takes at
/// least and those the process could take; as an error, to downcast.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OverMemory {
    pub message: String,
    pub needed_bytes: u64,
    pub available_bytes: u64,
}

/// Two sizes, `more` above `less`, as [`size`] writes them, or where
/// those read the same, in bytes: never `0.6 GiB ... more than the 0.6
/// GiB`.
fn apart(more: u64, less: u64) -> (String, String) {
    if size(more) != size(less) {
        (size(more), size(less))
    } else {
        (format!("{more} bytes"), format!("{less} bytes"))
    }
}

/// A size for a message: in tenths of a GiB from 1 GiB, else in MiB (a
/// figure below it never reads `0.0 GiB`).
fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", gib(bytes))
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Where planning `workload` would take more memory than `available`
/// ([`fateplan_planner::Workload::least_planning_bytes`]): "planning
/// workload W takes at least X GiB in memory (N tensors and M
/// operators), more than ...", for an error that adds what makes a
/// smaller workload. `None` where it fits, or nothing is known.
pub fn planning_shortfall(
    workload: &fateplan_planner::Workload,
    available: Option<&Available>,
) -> Option<Shortfall> {
    planning_shortfall_at_once(workload, 1, available)
}

/// [`planning_shortfall`] of `at_once` plans of workloads like
/// `workload` made side by side (the sweeps `--sweep auto` compares).
pub fn planning_shortfall_at_once(
    workload: &fateplan_planner::Workload,
    at_once: u64,
    available: Option<&Available>,
) -> Option<Shortfall> {
    let least = workload.least_planning_bytes();
    workload_shortfall(workload, least, None, at_once, available)
}

/// [`planning_shortfall_at_once`] with the workload's least planning
/// memory counted, `(bytes, of them the choices')`
/// ([`fateplan_planner::planner::least_planning_bytes_counted`]):
/// "planning workload W takes at least X GiB in memory (N tensors and M
/// operators, whose choices hold Y GiB), more than ...".
pub fn planning_shortfall_counted(
    workload: &fateplan_planner::Workload,
    (least, choices): (u64, u64),
    at_once: u64,
    available: Option<&Available>,
) -> Option<Shortfall> {
    workload_shortfall(workload, least, Some(choices), at_once, available)
}

/// The refusal of planning `at_once` workloads like `workload` that take
/// `least` bytes each, its choices' bytes said where counted.
fn workload_shortfall(
    workload: &fateplan_planner::Workload,
    least: u64,
    choices: Option<u64>,
    at_once: u64,
    available: Option<&Available>,
) -> Option<Shortfall> {
    let what = format!(
        "{} tensors and {} operators{}{}",
        workload.tensors.len(),
        workload.ops.len(),
        match choices {
            Some(bytes) => format!(
                ", whose choices hold {}",
                fateplan_planner::units::format_bytes(bytes)
            ),
            None => String::new(),
        },
        match at_once {
            1 => String::new(),
            n => format!(", {n} such plans made at once"),
        }
    );
    let short = available?.shortfall(least.saturating_mul(at_once), &what)?;
    Some(short.said(|short| format!("planning workload {:?} takes {short}", workload.name)))
}

/// [`planning_shortfall`] before a GNN's workload is built, from what
/// it has at least: `layers` times `blocks` (the blocks a layer
/// aggregates, [`fateplan_planner::gnn::aggregated_blocks`]) tensors, and
/// as many operators; "planning this workload takes at least X GiB ...".
/// A workload too large for that is refused without the memory and the
/// time its building would take.
pub fn planning_shortfall_before(
    layers: u32,
    blocks: u64,
    available: Option<&Available>,
) -> Option<Shortfall> {
    shortfall_before(layers, blocks, Work::Planning, available)
}

/// What [`shortfall_before`] checks the memory of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Building the workload and planning it
    /// ([`least_planning_bytes_before`]).
    Planning,
    /// Building the workload alone ([`least_building_bytes_before`]):
    /// the counts a search builds to measure, most never planned.
    Building,
}

/// [`planning_shortfall_before`] of `work`: "planning (or building) this
/// workload takes at least X GiB ...".
pub fn shortfall_before(
    layers: u32,
    blocks: u64,
    work: Work,
    available: Option<&Available>,
) -> Option<Shortfall> {
    let least = u64::from(layers).saturating_mul(blocks);
    let (bytes, verb) = match work {
        Work::Planning => (least_planning_bytes_before(layers, blocks), "planning"),
        Work::Building => (least_building_bytes_before(layers, blocks), "building"),
    };
    let what = format!(
        "at least {least} tensors and as many operators: {layers} layers of {blocks} blocks \
         each"
    );
    let short = available?.shortfall(bytes, &what)?;
    Some(short.said(|short| format!("{verb} this workload takes {short}")))
}

/// The least memory building a GNN's workload of `layers` layers
/// aggregating `blocks` blocks each takes, its tensors and operators
/// alone ([`fateplan_planner::workload::LEAST_BUILDING_BYTES_PER_ITEM`]).
pub fn least_building_bytes_before(layers: u32, blocks: u64) -> u64 {
    u64::from(layers)
        .saturating_mul(blocks)
        .saturating_mul(2)
        .saturating_mul(fateplan_planner::workload::LEAST_BUILDING_BYTES_PER_ITEM)
}

/// The least memory planning a GNN's workload of `layers` layers
/// aggregating `blocks` blocks each takes ([`planning_shortfall_before`]).
pub fn least_planning_bytes_before(layers: u32, blocks: u64) -> u64 {
    u64::from(layers)
        .saturating_mul(blocks)
        .saturating_mul(2)
        .saturating_mul(fateplan_planner::workload::LEAST_PLANNING_BYTES_PER_ITEM)
}

/// Why `what` (a lane, the worker threads) could not start its thread:
/// `error`, and the limits that leave no room for one. A thread is
/// refused for its stack (the address space, `ulimit -v`) or its count
/// (`ulimit -u`) as often as for a fault, and the message says so.
pub fn no_thread(what: &str, error: &dyn std::fmt::Display) -> String {
    format!(
        "cannot start {what} ({error}): the process's limits leave no room for another thread \
         (its address space, ulimit -v, or its processes, ulimit -u)"
    )
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// The memory this process can still take: the least of the limits the
/// module names that can be read; `None` where none can.
pub fn available() -> Option<Available> {
    least([meminfo(), address_space(), data(), cgroup()])
}

/// The memory this process and the processes it starts can still take
/// together: the least of `MemAvailable` and the cgroup's limit (the
/// address-space and data limits bound each process alone).
pub fn available_together() -> Option<Available> {
    least([meminfo(), cgroup()])
}

/// The least of `limits` that are known.
fn least(limits: impl IntoIterator<Item = Option<Available>>) -> Option<Available> {
    limits.into_iter().flatten().min_by_key(|limit| limit.bytes)
}

/// `MemAvailable` in `/proc/meminfo`.
fn meminfo() -> Option<Available> {
    let path = Path::new("/proc/meminfo");
    let info = parse_meminfo(&std::fs::read_to_string(path).ok()?, path).ok()?;
    Some(Available {
        bytes: info.available_bytes,
        source: "MemAvailable in /proc/meminfo".into(),
    })
}

/// A resource limit of the process and the field of
/// `/proc/self/status` that counts what it holds against it.
struct Limit {
    resource: libc::__rlimit_resource_t,
    /// The `/proc/self/status` field: `VmSize`, `VmData`.
    field: &'static str,
    /// As an error says it.
    name: &'static str,
}

/// The address-space limit: every mapping counts, reserved or not.
const ADDRESS_SPACE: Limit = Limit {
    resource: libc::RLIMIT_AS,
    field: "VmSize",
    name: "the address-space limit (ulimit -v)",
};

/// The data limit: since Linux 4.7, the private writable mappings, which
/// the heap is.
const DATA: Limit = Limit {
    resource: libc::RLIMIT_DATA,
    field: "VmData",
    name: "the data limit (ulimit -d)",
};

/// The address-space limit, where there is one, less the process's
/// `VmSize` in `/proc/self/status`.
fn address_space() -> Option<Available> {
    limit_now(&ADDRESS_SPACE)
}

/// The data limit, where there is one, less the process's `VmData`.
fn data() -> Option<Available> {
    limit_now(&DATA)
}

/// `limit`, where the process has one, less what it holds now.
fn limit_now(limit: &Limit) -> Option<Available> {
    let mut value = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit writes the struct it is given, and nothing else.
    if unsafe { libc::getrlimit(limit.resource, &mut value) } != 0 {
        return None;
    }
    if value.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok();
    Some(limit_left(limit, value.rlim_cur, status.as_deref()))
}

/// What `limit` of `limit_bytes` leaves a process whose
/// `/proc/self/status` reads `status` (the limit whole where its field
/// cannot be read).
fn limit_left(limit: &Limit, limit_bytes: u64, status: Option<&str>) -> Available {
    let held =
        status.and_then(|text| size_field(text, limit.field, Path::new("/proc/self/status")).ok());
    let name = format!("{} of {}", limit.name, size(limit_bytes));
    match held {
        Some(held) => Available {
            bytes: limit_bytes.saturating_sub(held),
            source: format!("{name} less the {} this process maps", size(held)),
        },
        None => Available {
            bytes: limit_bytes,
            source: name,
        },
    }
}

/// The process's cgroup v2 limit (its `0::` line in `/proc/self/cgroup`).
fn cgroup() -> Option<Available> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let relative = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?;
    cgroup_left(Path::new(CGROUP_ROOT), relative.trim())
}

/// The least `memory.max` less `memory.current` of the cgroup `relative`
/// under `root` and of those above it up to `root` (a `max` limit is
/// none; a folder without the files is passed over). A path that climbs
/// out of `root` is read as `root` itself.
fn cgroup_left(root: &Path, relative: &str) -> Option<Available> {
    let relative = Path::new(relative.trim_start_matches('/'));
    let inside = relative
        .components()
        .all(|part| matches!(part, Component::Normal(_)));
    let mut folder = if inside {
        root.join(relative)
    } else {
        root.to_path_buf()
    };
    let mut found = Vec::new();
    // Bounded by the path's depth: each turn climbs one folder.
    loop {
        found.push(cgroup_headroom(&folder));
        if folder == root || !folder.pop() {
            break;
        }
    }
    least(found)
}

/// `memory.max` less `memory.current` in the cgroup folder `folder`;
/// `None` where its limit is `max` or either file cannot be read.
fn cgroup_headroom(folder: &Path) -> Option<Available> {
    let read = |name: &str| std::fs::read_to_string(folder.join(name)).ok();
    let max = read("memory.max")?;
    let max = max.trim();
    if max == "max" {
        return None;
    }
    let max: u64 = max.parse().ok()?;
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(Available {
        bytes: max.saturating_sub(current),
        source: format!(
            "the cgroup limit of {} less the {} in use: memory.max less memory.current in {}",
            size(max),
            size(current),
            folder.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(bytes: u64, source: &str) -> Option<Available> {
        Some(Available {
            bytes,
            source: source.into(),
        })
    }

    /// Planning a GNN's workload is refused where its least bytes are
    /// more than the memory left, and only there: the message names the
    /// workload, its size and the figures.
    #[test]
    fn a_workload_too_large_to_plan_is_told_apart() {
        use fateplan_planner::blocks::BlockCounts;
        use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
        let spec = GnnSpec::new(GnnModel::Gcn, 8, 4, "tiny");
        let workload = build_gnn(&spec, &BlockCounts::skewed(1000, 8000, 4).unwrap()).unwrap();
        let least = workload.least_planning_bytes();
        let items = (workload.tensors.len() + workload.ops.len()) as u64;
        assert!(least >= items * 1024, "{least} for {items}");
        assert_eq!(planning_shortfall(&workload, None), None);
        let room = limit(least, "meminfo").unwrap();
        assert_eq!(planning_shortfall(&workload, Some(&room)), None);
        let tight = limit(least - 1, "meminfo").unwrap();
        // Two side by side take twice.
        let two = limit(2 * least - 1, "meminfo").unwrap();
        assert_eq!(planning_shortfall(&workload, Some(&two)), None);
        let twice = planning_shortfall_at_once(&workload, 2, Some(&two))
            .unwrap()
            .text;
        assert!(
            twice.contains("operators, 2 such plans made at once)"),
            "{twice}"
        );
        let said = planning_shortfall(&workload, Some(&tight)).unwrap();
        assert_eq!(
            (said.needed_bytes, said.available_bytes),
            (least, least - 1)
        );
        let said = said.text;
        let counts = format!(
            "({} tensors and {} operators)",
            workload.tensors.len(),
            workload.ops.len()
        );
        assert!(
            said.starts_with(&format!(
                "planning workload {:?} takes at least",
                workload.name
            )) && said.contains(&counts)
                && said.ends_with("available (meminfo)"),
            "{said}"
        );
    }

    /// Before it is built, a workload is refused from its least: layers
    /// times blocks tensors and as many operators.
    #[test]
    fn a_workload_is_refused_from_its_blocks_before_it_is_built() {
        let per = fateplan_planner::workload::LEAST_PLANNING_BYTES_PER_ITEM;
        let least = 2 * 64 * 65536 * per;
        assert_eq!(planning_shortfall_before(64, 65536, None), None);
        let room = limit(least, "meminfo").unwrap();
        assert_eq!(planning_shortfall_before(64, 65536, Some(&room)), None);
        let tight = limit(least - 1, "meminfo").unwrap();
        let said = planning_shortfall_before(64, 65536, Some(&tight))
            .unwrap()
            .text;
        assert!(
            said.starts_with("planning this workload takes at least")
                && said.contains("(at least 4194304 tensors and as many operators: 64 layers of 65536 blocks each)"),
            "{said}"
        );
        // Building alone takes less: refused only below its own least.
        let built = 2 * 64 * 65536 * fateplan_planner::workload::LEAST_BUILDING_BYTES_PER_ITEM;
        assert!(built < least);
        let room = limit(built, "meminfo").unwrap();
        assert_eq!(
            shortfall_before(64, 65536, Work::Building, Some(&room)),
            None
        );
        let tight = limit(built - 1, "meminfo").unwrap();
        let said = shortfall_before(64, 65536, Work::Building, Some(&tight))
            .unwrap()
            .text;
        assert!(
            said.starts_with("building this workload takes at least"),
            "{said}"
        );
    }

    #[test]
    fn the_least_known_limit_is_the_figure() {
        assert_eq!(least([None, None]), None);
        let figure = least([limit(8 << 30, "meminfo"), None, limit(3 << 30, "ulimit")]);
        assert_eq!(figure, limit(3 << 30, "ulimit"));
        let short = figure.unwrap().shortfall(6 << 30, "a graph").unwrap();
        assert_eq!(
            short,
            Shortfall {
                text: "at least 6.0 GiB in memory (a graph), more than the 3.0 GiB available \
                       (ulimit)"
                    .into(),
                needed_bytes: 6 << 30,
                available_bytes: 3 << 30,
            }
        );
        assert_eq!(limit(3 << 30, "x").unwrap().shortfall(3 << 30, "y"), None);
        // Sizes a tenth of a GiB rounds together are told apart.
        let mib = 1u64 << 20;
        let short = limit(600 * mib, "x")
            .unwrap()
            .shortfall(640 * mib, "y")
            .unwrap()
            .text;
        assert!(
            short.starts_with("at least 640 MiB in memory (y), more than the 600 MiB"),
            "{short}"
        );
        let short = limit(600 * mib, "x")
            .unwrap()
            .shortfall(600 * mib + 1, "y")
            .unwrap()
            .text;
        assert!(
            short.contains(&format!("more than the {} bytes", 600 * mib)),
            "{short}"
        );
    }

    #[test]
    fn an_address_space_limit_leaves_what_the_process_does_not_map() {
        let status = "Name:\tfateplan\nVmPeak:\t  400000 kB\nVmSize:\t  307200 kB\n";
        let left = limit_left(&ADDRESS_SPACE, 3 << 30, Some(status));
        assert_eq!(left.bytes, (3 << 30) - (300 << 20));
        assert_eq!(
            left.source,
            "the address-space limit (ulimit -v) of 3.0 GiB less the 300 MiB this process maps"
        );
        // A process that maps more than its limit has nothing left.
        assert_eq!(limit_left(&ADDRESS_SPACE, 1 << 20, Some(status)).bytes, 0);
        let unread = limit_left(&ADDRESS_SPACE, 3 << 30, None);
        assert_eq!(unread.bytes, 3 << 30);
        assert!(!unread.source.contains("maps"), "{}", unread.source);
        // The data limit counts the heap's mappings alone.
        let data = limit_left(
            &DATA,
            1 << 30,
            Some("VmSize:\t 4194304 kB\nVmData:\t 102400 kB\n"),
        );
        assert_eq!(data.bytes, (1 << 30) - (100 << 20));
        assert!(
            data.source
                .starts_with("the data limit (ulimit -d) of 1.0 GiB"),
            "{}",
            data.source
        );
    }

    #[test]
    fn a_cgroup_s_limit_is_the_least_headroom_up_to_the_root() {
        let root = tempfile::tempdir().unwrap();
        let write = |folder: &str, max: &str, current: &str| {
            let dir = root.path().join(folder);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("memory.max"), format!("{max}\n")).unwrap();
            std::fs::write(dir.join("memory.current"), format!("{current}\n")).unwrap();
        };
        // No files, or no limit: nothing known.
        assert_eq!(cgroup_left(root.path(), "/"), None);
        write("", "max", "100");
        write("a", "max", "5000");
        assert_eq!(cgroup_left(root.path(), "/a"), None);
        // The process's own cgroup (a/b) leaves 6 GiB, its parent's 2:
        // the parent's is the figure.
        std::fs::create_dir_all(root.path().join("a/b/c")).unwrap();
        write("a", &(10u64 << 30).to_string(), &(8u64 << 30).to_string());
        write("a/b", &(7u64 << 30).to_string(), &(1u64 << 30).to_string());
        let figure = cgroup_left(root.path(), "/a/b/c").unwrap();
        assert_eq!(figure.bytes, 2 << 30);
        assert!(
            figure.source.contains("memory.max less memory.current in")
                && figure.source.ends_with("/a"),
            "{}",
            figure.source
        );
        assert_eq!(cgroup_left(root.path(), "/a/b").unwrap().bytes, 2 << 30);
        // A path out of the root is read as the root.
        write("", &(1u64 << 30).to_string(), "0");
        assert_eq!(cgroup_left(root.path(), "/../..").unwrap().bytes, 1 << 30);
    }

    #[test]
    fn this_process_has_a_figure_no_larger_than_mem_available() {
        let Some(figure) = available() else {
            eprintln!("skipped: no memory limit can be read here");
            return;
        };
        if let Some(meminfo) = meminfo() {
            assert!(figure.bytes <= meminfo.bytes, "{figure:?} {meminfo:?}");
        }
    }
}
