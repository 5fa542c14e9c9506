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

use anyhow::{bail, Result};
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

    /// Grants the job's access key to every host of `hosts` (with `ticket`, a reservation
    /// there), from `local`, and adds them to the peers; a host that refuses fails the grant.
    pub fn grant(&mut self, local: IpAddr, grid: &GridSecret, ticket: Ticket, hosts: &[PeerInfo]) -> Result<()> {
        let key = access_key(&self.secret);
        for h in hosts {
            let addr = ft_addr(h);
            let req = FtRequest::CheckpointGrant { ticket, job: self.job.clone(), key };
            let answer = SecureConn::connect_from(Some(local), addr, grid, GRANT_TIMEOUT)
                .and_then(|mut c| c.call::<_, FtResponse>(&req));
            match answer {
                Ok(FtResponse::Granted) => {}
                Ok(FtResponse::Error(e)) => bail!("host {} refused the job's checkpoints: {e}", h.id),
                Ok(other) => bail!("host {} answered {other:?} to the checkpoint grant", h.id),
                Err(e) => bail!("cannot grant the job's checkpoints to host {}: {e}", h.id),
            }
            if !self.peers.contains(&addr) {
                self.peers.push(addr);
            }
        }
        Ok(())
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
