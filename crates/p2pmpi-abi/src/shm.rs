//! Memory shared by the processes of one host, for shared-memory windows
//! (`MPI_Win_allocate_shared`, [`crate::win_shared`]): one file in `/dev/shm`, made by one
//! process and mapped by every other, then unlinked; or, for a window of one process, an
//! anonymous mapping. The mapping lives while its [`Segment`] does.

use std::ffi::CString;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

/// A mapping of shared memory (unmapped when dropped).
pub struct Segment {
    addr: *mut c_void,
    len: usize,
}

// SAFETY: the mapping is plain memory; who writes where is the program's business (MPI's
// rules of shared windows), the segment only owns the address range.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

/// Makes each name of this process different.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The size of a page.
fn page() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// `len` rounded up to whole pages (at least one).
fn pages(len: usize) -> usize {
    let p = page();
    len.max(1).div_ceil(p) * p
}

impl Segment {
    /// The first byte.
    pub fn addr(&self) -> *mut c_void {
        self.addr
    }

    /// Maps `len` bytes (zeroed) of memory no other process sees.
    pub fn private(len: usize) -> std::io::Result<Segment> {
        let len = pages(len);
        // SAFETY: a new anonymous mapping; nothing else is at the address the kernel picks.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Segment { addr, len })
    }

    /// A new name for a segment of this process (at most 63 bytes).
    pub fn new_name() -> String {
        format!("/p2pmpi-win-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Makes the shared segment `name` of `len` bytes (zeroed) and maps it.
    pub fn create(name: &str, len: usize) -> std::io::Result<Segment> {
        Self::map(name, pages(len), true)
    }

    /// Maps the segment `name` another process made, `len` bytes as it was made.
    pub fn open(name: &str, len: usize) -> std::io::Result<Segment> {
        Self::map(name, pages(len), false)
    }

    fn map(name: &str, len: usize, create: bool) -> std::io::Result<Segment> {
        let c = CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let flags = if create { libc::O_RDWR | libc::O_CREAT | libc::O_EXCL } else { libc::O_RDWR };
        // SAFETY: `c` is a NUL-terminated string that outlives the call.
        let fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is the descriptor just opened, closed once mapped (the mapping stays).
        let addr = unsafe {
            if create && libc::ftruncate(fd, len as libc::off_t) != 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                libc::shm_unlink(c.as_ptr());
                return Err(e);
            }
            let a = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            libc::close(fd);
            a
        };
        if addr == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            if create {
                unlink(name);
            }
            return Err(e);
        }
        Ok(Segment { addr, len })
    }
}

/// Removes the name of segment `name` (its mappings stay).
pub fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: `c` is a NUL-terminated string that outlives the call.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping this segment made, used by no one once it is dropped (the
        // window that held it is gone).
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_through_one_mapping_is_seen_through_another() {
        let name = Segment::new_name();
        let a = Segment::create(&name, 100).expect("create");
        let b = Segment::open(&name, 100).expect("open");
        unlink(&name);
        // SAFETY: both map at least one page of the same file.
        unsafe {
            assert_eq!(*(b.addr() as *const u8).add(99), 0);
            *(a.addr() as *mut u8).add(99) = 42;
            assert_eq!(*(b.addr() as *const u8).add(99), 42);
        }
        assert!(Segment::open(&name, 100).is_err(), "the name is gone once unlinked");
    }

    #[test]
    fn a_private_segment_is_zeroed_whole_pages() {
        let s = Segment::private(0).expect("map");
        assert!(s.len >= 1 && s.len % page() == 0);
        // SAFETY: at least one page is mapped.
        assert_eq!(unsafe { *(s.addr() as *const u8) }, 0);
    }
}
