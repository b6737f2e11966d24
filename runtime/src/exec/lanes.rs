//! Transfer lanes: one thread per stream, running copies in issue order
//! while the compute thread goes on. Every wait is explicit: a copy's
//! [`Pending`] is waited for at the step the plan says it is done by.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::exec::data::Data;
use crate::exec::ExecError;

/// Most copies queued on one lane at once; issuing more blocks the issuer.
pub const LANE_QUEUE: usize = 4096;

type Job = Box<dyn FnOnce() -> Result<Option<Data>, ExecError> + Send>;
/// What a finished copy sends back: its result and when it ran.
type Done = (Result<Option<Data>, ExecError>, Span);

/// When a copy ran, in seconds since the executor's clock started.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Span {
    pub start_s: f64,
    pub end_s: f64,
}

/// A copy in flight.
pub struct Pending {
    receiver: Receiver<Done>,
}

impl Pending {
    /// Blocks until the copy is done; returns what it produced (a reload's
    /// device copy) and when it ran.
    pub fn wait(self) -> Result<(Option<Data>, Span), ExecError> {
        let (result, span) = self.receiver.recv().map_err(|_| {
            ExecError::Internal("a transfer lane stopped before finishing a copy".into())
        })?;
        Ok((result?, span))
    }
}

/// One stream's thread.
pub struct Lane {
    name: &'static str,
    sender: Option<SyncSender<(Job, SyncSender<Done>)>>,
    thread: Option<JoinHandle<()>>,
}

impl Lane {
    pub fn start(name: &'static str, clock: Instant) -> Result<Lane, ExecError> {
        let (sender, receiver) = mpsc::sync_channel::<(Job, SyncSender<Done>)>(LANE_QUEUE);
        let thread = std::thread::Builder::new()
            .name(format!("fateplan-{name}"))
            .spawn(move || {
                for (job, done) in receiver {
                    let start_s = clock.elapsed().as_secs_f64();
                    let result = job();
                    let span = Span {
                        start_s,
                        end_s: clock.elapsed().as_secs_f64(),
                    };
                    // The waiter may have given up after an earlier error.
                    let _ = done.send((result, span));
                }
            })
            .map_err(|e| {
                ExecError::Threads(crate::memory::no_thread(&format!("the {name} lane"), &e))
            })?;
        Ok(Lane {
            name,
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Queues `job` behind the copies already issued on this lane.
    pub fn issue(
        &self,
        job: impl FnOnce() -> Result<Option<Data>, ExecError> + Send + 'static,
    ) -> Result<Pending, ExecError> {
        let (done, receiver) = mpsc::sync_channel(1);
        self.sender
            .as_ref()
            .expect("a lane's sender lives until drop")
            .send((Box::new(job), done))
            .map_err(|_| ExecError::Internal(format!("the {} lane has stopped", self.name)))?;
        Ok(Pending { receiver })
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.sender.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_run_in_issue_order_and_report_errors() {
        let lane = Lane::start("test", Instant::now()).unwrap();
        let first = lane.issue(|| Ok(Some(Data::I64(vec![1])))).unwrap();
        let second = lane
            .issue(|| Err(ExecError::Internal("boom".into())))
            .unwrap();
        let third = lane.issue(|| Ok(None)).unwrap();
        let (data, a) = first.wait().unwrap();
        assert_eq!(data, Some(Data::I64(vec![1])));
        assert!(second.wait().unwrap_err().to_string().contains("boom"));
        let (none, c) = third.wait().unwrap();
        assert!(none.is_none() && c.start_s >= a.end_s);
    }
}
