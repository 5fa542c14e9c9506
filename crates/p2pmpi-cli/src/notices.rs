//! A launcher's reports of its job's events (placement, failures, takeovers, fenced
//! processes, the end) to its local MPD, which keeps a bounded recent list per job and shows
//! it in its `Report` (`p2pmpi grid status`, `p2pmpi monitor`).
//!
//! The job never waits for them: notices go through a channel to a thread that sends them in
//! batches (`MpdRequest::JobNotices`, over the grid's authenticated channel). A daemon that
//! does not answer costs the job nothing but these notices.

use p2pmpi_core::replication::Layout;
use p2pmpi_peer::mpd;
use p2pmpi_wire::grid::{JobNotice, JobNoticeKind, MpdRequest};
use p2pmpi_wire::secure::GridSecret;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Where a job's notices go.
pub struct Notifier {
    layout: Layout,
    /// The host of each slot.
    hosts: Vec<String>,
    tx: Mutex<Option<Sender<JobNotice>>>,
    done: Mutex<Option<Receiver<()>>>,
}

impl Notifier {
    /// Starts the sender thread for `job` (running `app`), reporting to the MPD at `mpd_addr`
    /// from `me`; `hosts` names the host of each slot.
    pub fn start(
        job: String,
        app: String,
        layout: Layout,
        hosts: Vec<String>,
        me: IpAddr,
        mpd_addr: SocketAddr,
        secret: GridSecret,
    ) -> Notifier {
        let (tx, rx) = channel::<JobNotice>();
        let (done_tx, done) = channel();
        std::thread::spawn(move || {
            // Each batch: the first notice waited for, then whatever else is already queued.
            while let Ok(first) = rx.recv() {
                let mut notices = vec![first];
                notices.extend(rx.try_iter());
                let req = MpdRequest::JobNotices { job: job.clone(), app: app.clone(), notices };
                if let Err(e) = mpd::call(Some(me), mpd_addr, &secret, &req) {
                    tracing::debug!("job notices not delivered: {e:#}");
                }
            }
            let _ = done_tx.send(());
        });
        Notifier { layout, hosts, tx: Mutex::new(Some(tx)), done: Mutex::new(Some(done)) }
    }

    /// Reports `kind` about the process in `slot`.
    pub fn note(&self, kind: JobNoticeKind, slot: usize, detail: impl Into<String>) {
        let n = JobNotice {
            at_ms: now_ms(),
            kind,
            rank: self.layout.rank_of(slot) as u32,
            replica: self.layout.replica_of(slot) as u32,
            host: self.hosts.get(slot).cloned().unwrap_or_default(),
            detail: detail.into(),
        };
        if let Some(tx) = self.tx.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = tx.send(n);
        }
    }

    /// Every process placed: one notice each.
    pub fn placed(&self) {
        for slot in 0..self.layout.slots() {
            self.note(JobNoticeKind::Placed, slot, "");
        }
    }

    /// The job ended (`detail`: how): the last notice, delivered before this returns (or
    /// given up after `limit`).
    pub fn finish(&self, detail: impl Into<String>, limit: Duration) {
        self.note(JobNoticeKind::Ended, 0, detail);
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(done) = self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = done.recv_timeout(limit);
        }
    }
}
