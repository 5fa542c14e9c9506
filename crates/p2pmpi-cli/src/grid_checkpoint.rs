//! The checkpoints of a grid job, the launcher's side (issue 41): the job's checkpoint secret,
//! its grant to the peers' FT services, the variables that describe the store to the ranks,
//! and the same store opened here ([`GridCheckpoints::store`]) to find and read the last
//! complete generation (a restart).
//!
//! The ranks keep their pieces on the job's hosts other than their own
//! ([`p2pmpi::checkpoint::peers`]): every host that runs a process of the job is granted the
//! job's access key (over the grid's Noise session, with the reservation's ticket), and is
//! listed in [`env::PEERS`]. The secret travels only in the processes' environment, inside
//! the launch requests (encrypted), as the job key does.

use anyhow::Result;
use p2pmpi::checkpoint::env;
use p2pmpi::checkpoint::peers::{access_key, Peers};
use p2pmpi_wire::grid::{FtRequest, FtResponse, PeerInfo, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Time to grant a host.
const GRANT_TIMEOUT: Duration = Duration::from_secs(10);

/// A grid job's checkpoints: where, under which id, with which secret.
#[derive(Clone)]
pub struct GridCheckpoints {
    /// The id the peers keep them under (the job's first id: a restart keeps it).
    pub job: String,
    secret: [u8; 32],
    /// The FT addresses of the peers that may keep them.
    pub peers: Vec<SocketAddr>,
    /// Copies of each piece (`--checkpoint-copies`).
    pub copies: usize,
}

/// The FT address of a peer.
pub fn ft_addr(info: &PeerInfo) -> SocketAddr {
    SocketAddr::new(info.id.ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])), info.ft_port)
}

impl GridCheckpoints {
    /// A new job's checkpoints: a fresh secret, no peers yet.
    pub fn new(job: &str, copies: usize) -> Result<GridCheckpoints> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no random bytes for the checkpoint key: {e}"))?;
        Ok(GridCheckpoints { job: job.to_string(), secret, peers: Vec::new(), copies })
    }

    /// Grants the job's access key to every host of `hosts` at once (with `ticket`, a
    /// reservation there), from `local`, and adds those that took it to the peers. A host
    /// that refuses (a daemon without checkpoints, unreachable) keeps none of the job's
    /// checkpoints: it is returned with why, and the job runs all the same.
    pub fn grant(
        &mut self,
        local: IpAddr,
        grid: &GridSecret,
        ticket: Ticket,
        hosts: &[PeerInfo],
    ) -> Vec<(String, String)> {
        let key = access_key(&self.secret);
        let req = FtRequest::CheckpointGrant { ticket, job: self.job.clone(), key };
        let answers: Vec<Result<(), String>> = std::thread::scope(|s| {
            let asks: Vec<_> = hosts
                .iter()
                .map(|h| {
                    let req = &req;
                    s.spawn(move || {
                        let answer = SecureConn::connect_from(Some(local), ft_addr(h), grid, GRANT_TIMEOUT)
                            .and_then(|mut c| c.call::<_, FtResponse>(req));
                        match answer {
                            Ok(FtResponse::Granted) => Ok(()),
                            Ok(FtResponse::Error(e)) => Err(e),
                            Ok(other) => Err(format!("answered {other:?}")),
                            Err(e) => Err(e.to_string()),
                        }
                    })
                })
                .collect();
            asks.into_iter().map(|a| a.join().unwrap_or_else(|_| Err("the grant's thread panicked".into()))).collect()
        });
        let mut refused = Vec::new();
        for (h, a) in hosts.iter().zip(answers) {
            match a {
                Ok(()) if !self.peers.contains(&ft_addr(h)) => self.peers.push(ft_addr(h)),
                Ok(()) => {}
                Err(why) => refused.push((h.id.to_string(), why)),
            }
        }
        refused
    }

    /// The variables that describe the store to the job's processes.
    pub fn env(&self) -> Vec<(String, String)> {
        let peers: Vec<String> = self.peers.iter().map(|a| a.to_string()).collect();
        let key: String = self.secret.iter().map(|b| format!("{b:02x}")).collect();
        vec![
            (env::PEERS.to_string(), peers.join(",")),
            (env::KEY.to_string(), key),
            (env::JOB.to_string(), self.job.clone()),
            (env::COPIES.to_string(), self.copies.to_string()),
        ]
    }

    /// The store, as the processes see it (`latest()`, `get_piece()`), from this host.
    pub fn store(&self) -> Peers {
        Peers::new(&self.job, &self.secret, self.peers.clone(), self.copies, None)
    }
}
