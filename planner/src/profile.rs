//! Hardware profiles: capacity and speed of every tier and link.
//!
//! The schema is documented in `profiles/README.md`; units are in the field
//! names. Every figure of a shipped profile has an entry in `sources`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Version of the profile JSON format.
pub const PROFILE_FORMAT_VERSION: u32 = 1;

/// Most devices a plan is for.
pub const MAX_GPUS: u32 = 1024;

/// What executes the operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Gpu,
    /// The CPU backend: the device tier is an arena in host memory.
    Cpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    pub kind: DeviceKind,
    pub model: String,
    /// Devices per node.
    pub count_max: u32,
    pub hbm_bytes: u64,
    pub hbm_bytes_per_s: f64,
    pub dense_flops_per_s: f64,
    /// Effective bandwidth of the irregular gathers of SpMM and SDDMM.
    pub sparse_bytes_per_s: f64,
    /// Fixed cost of launching one operator.
    pub op_overhead_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    pub memory_bytes: u64,
    pub memory_bytes_per_s: f64,
    pub cores: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieProfile {
    pub h2d_bytes_per_s: f64,
    pub d2h_bytes_per_s: f64,
    pub latency_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerProfile {
    /// Device-to-device bandwidth, each direction.
    pub bytes_per_s: f64,
    pub latency_s: f64,
    /// What carries device-to-device copies: NVLink (their own link), or
    /// PCIe (they cross each device's PCIe link, beside host copies).
    #[serde(default, skip_serializing_if = "PeerVia::is_nvlink")]
    pub via: PeerVia,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerVia {
    #[default]
    Nvlink,
    Pcie,
}

impl PeerVia {
    fn is_nvlink(&self) -> bool {
        *self == PeerVia::Nvlink
    }
}

/// The link between nodes (one network interface per device, as on
/// DGX-class machines): what devices on different nodes exchange over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkProfile {
    /// Bandwidth per device, each direction.
    pub bytes_per_s: f64,
    pub latency_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsdProfile {
    pub capacity_bytes: u64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    pub read_latency_s: f64,
    pub write_latency_s: f64,
}

/// A machine as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub format_version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub device: DeviceProfile,
    pub host: HostProfile,
    pub pcie: PcieProfile,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerProfile>,
    /// Between nodes; needed for more devices than `device.count_max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkProfile>,
    pub ssd: SsdProfile,
    /// Where each figure comes from, keyed by dotted field path.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
}

impl Profile {
    /// Reads and validates a profile; `source` names the file in errors.
    pub fn from_json(text: &str, source: &str) -> Result<Profile> {
        let profile: Profile = crate::json::parse(text, source)?;
        profile
            .validate()
            .map_err(|error| crate::json::within(source, error))?;
        Ok(profile)
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile always serializes")
    }

    /// Every numeric field by dotted path, for validation and for checking sources.
    pub fn figures(&self) -> Vec<(&'static str, f64)> {
        let d = &self.device;
        let mut figures = vec![
            ("device.count_max", d.count_max as f64),
            ("device.hbm_bytes", d.hbm_bytes as f64),
            ("device.hbm_bytes_per_s", d.hbm_bytes_per_s),
            ("device.dense_flops_per_s", d.dense_flops_per_s),
            ("device.sparse_bytes_per_s", d.sparse_bytes_per_s),
            ("device.op_overhead_s", d.op_overhead_s),
            ("host.memory_bytes", self.host.memory_bytes as f64),
            ("host.memory_bytes_per_s", self.host.memory_bytes_per_s),
            ("host.cores", self.host.cores as f64),
            ("pcie.h2d_bytes_per_s", self.pcie.h2d_bytes_per_s),
            ("pcie.d2h_bytes_per_s", self.pcie.d2h_bytes_per_s),
            ("pcie.latency_s", self.pcie.latency_s),
            ("ssd.capacity_bytes", self.ssd.capacity_bytes as f64),
            ("ssd.read_bytes_per_s", self.ssd.read_bytes_per_s),
            ("ssd.write_bytes_per_s", self.ssd.write_bytes_per_s),
            ("ssd.read_latency_s", self.ssd.read_latency_s),
            ("ssd.write_latency_s", self.ssd.write_latency_s),
        ];
        if let Some(peer) = &self.peer {
            figures.push(("peer.bytes_per_s", peer.bytes_per_s));
            figures.push(("peer.latency_s", peer.latency_s));
        }
        if let Some(network) = &self.network {
            figures.push(("network.bytes_per_s", network.bytes_per_s));
            figures.push(("network.latency_s", network.latency_s));
        }
        figures
    }

    /// Devices per node when `gpus` devices train together.
    pub fn gpus_per_node(&self, gpus: u32) -> u32 {
        gpus.clamp(1, self.device.count_max.max(1))
    }

    /// Checks that `gpus` devices can train together on this machine: at
    /// most `device.count_max` on one node, more only with a `network`
    /// section (whole nodes) and a `peer` link.
    pub fn check_gpus(&self, gpus: u32) -> Result<()> {
        let per_node = self.device.count_max.max(1);
        let field = || format!("gpus {gpus} on profile {:?}", self.name);
        if gpus == 0 || gpus > MAX_GPUS {
            return Err(Error::invalid(
                field(),
                format!("must be in 1..={MAX_GPUS}"),
            ));
        }
        if gpus > 1 && self.peer.is_none() {
            return Err(Error::invalid(
                field(),
                "the profile has no peer section (device-to-device link)",
            ));
        }
        if gpus > per_node {
            if self.network.is_none() {
                return Err(Error::invalid(
                    field(),
                    format!(
                        "more than device.count_max ({per_node}) needs a network section between nodes"
                    ),
                ));
            }
            if !gpus.is_multiple_of(per_node) {
                return Err(Error::invalid(
                    field(),
                    format!("more than one node must be whole nodes of {per_node} devices"),
                ));
            }
        }
        Ok(())
    }

    /// One device's share of its node when `gpus` devices train together:
    /// host memory, its bandwidth and cores, and the SSD (capacity and
    /// rates) are divided between the node's devices, which use them at
    /// the same time. Device, PCIe, peer and network figures are per
    /// device already.
    pub fn share(&self, gpus: u32) -> Profile {
        let per_node = self.gpus_per_node(gpus);
        if per_node == 1 {
            return self.clone();
        }
        let n = per_node as f64;
        let mut out = self.clone();
        out.host.memory_bytes /= per_node as u64;
        out.host.memory_bytes_per_s /= n;
        out.host.cores = (out.host.cores / per_node).max(1);
        out.ssd.capacity_bytes /= per_node as u64;
        out.ssd.read_bytes_per_s /= n;
        out.ssd.write_bytes_per_s /= n;
        out
    }

    /// Rates and counts must be positive and finite; latencies and overheads
    /// finite and not negative.
    pub fn validate(&self) -> Result<()> {
        let context = || format!("profile {:?}", self.name);
        if self.format_version != PROFILE_FORMAT_VERSION {
            return Err(Error::invalid(
                format!("{} field format_version", context()),
                format!(
                    "{} is not supported; this build reads version {PROFILE_FORMAT_VERSION}",
                    self.format_version
                ),
            ));
        }
        if self.name.is_empty() {
            return Err(Error::invalid("profile field name", "is empty"));
        }
        for (field, value) in self.figures() {
            let may_be_zero = field.ends_with("latency_s") || field.ends_with("overhead_s");
            let ok = value.is_finite()
                && if may_be_zero {
                    value >= 0.0
                } else {
                    value > 0.0
                };
            if !ok {
                let rule = if may_be_zero {
                    "finite and not negative"
                } else {
                    "positive"
                };
                return Err(Error::invalid(
                    format!("{} field {field}", context()),
                    format!("{value} must be {rule}"),
                ));
            }
        }
        Ok(())
    }
}
