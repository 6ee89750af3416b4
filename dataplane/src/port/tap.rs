//! TAP ports: Linux `/dev/net/tun` in TAP mode, without DPDK.
//!
//! sluice is a host on the TAP link with a MAC of its own (derived from the interface
//! name); the kernel's side of the device is its peer. Reads and writes go straight
//! between the fd and preallocated pool buffers (no allocation per packet). With more than
//! one queue the device is opened with `IFF_MULTI_QUEUE` and the kernel spreads flows over
//! the queues. The device is not persistent: it disappears when sluice closes it.

use super::{Burst, LinkState, Opened, Pkt, Pool, Port, PortError, PortStats, Queue};
use crate::wire::MacAddr;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;

/// `struct ifreq` with the `ifr_flags` member of its union (40 bytes on Linux).
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl IfReqFlags {
    fn new(ifname: &str) -> IfReqFlags {
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..ifname.len()].copy_from_slice(ifname.as_bytes());
        IfReqFlags {
            name,
            flags: 0,
            _pad: [0; 22],
        }
    }
}

#[derive(Default)]
struct Counters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    rx_missed: AtomicU64,
    tx_errors: AtomicU64,
}

struct TapDev {
    name: String,
    ifname: String,
    mac: MacAddr,
    queues: u16,
    counters: Counters,
}

impl Port for TapDev {
    fn name(&self) -> &str {
        &self.name
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn link(&self) -> LinkState {
        match if_flags(&self.ifname) {
            Ok(f) if f & libc::IFF_UP as libc::c_short != 0 => LinkState::Up { speed_mbps: 0 },
            _ => LinkState::Down,
        }
    }
    fn stats(&self) -> PortStats {
        let c = &self.counters;
        PortStats {
            rx_packets: c.rx_packets.load(Relaxed),
            rx_bytes: c.rx_bytes.load(Relaxed),
            tx_packets: c.tx_packets.load(Relaxed),
            tx_bytes: c.tx_bytes.load(Relaxed),
            rx_missed: c.rx_missed.load(Relaxed),
            rx_errors: 0,
            tx_errors: c.tx_errors.load(Relaxed),
        }
    }
}

struct TapQueue {
    dev: Arc<TapDev>,
    fd: OwnedFd,
    pool: Pool,
    /// A buffer kept ready for the next read, so an empty poll costs one syscall and
    /// nothing else.
    spare: Option<Pkt>,
}

impl Queue for TapQueue {
    fn allocator(&self) -> Option<super::Allocator> {
        Some(self.pool.clone().into())
    }

    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        let (mut n, mut bytes) = (0usize, 0u64);
        while !out.is_full() {
            let mut p = match self.spare.take().or_else(|| self.pool.alloc()) {
                Some(p) => p,
                None => {
                    self.dev.counters.rx_missed.fetch_add(1, Relaxed);
                    break;
                }
            };
            let cap = p.capacity();
            let _ = p.set_len(cap);
            let buf = p.data_mut();
            // SAFETY: `buf` is a valid writable region of `buf.len()` bytes owned by `p`;
            // the fd is open for the lifetime of `self`.
            let r = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if r <= 0 {
                self.spare = Some(p);
                break;
            }
            let _ = p.set_len(r as usize);
            bytes += r as u64;
            n += 1;
            let _ = out.push(p);
        }
        if n > 0 {
            self.dev.counters.rx_packets.fetch_add(n as u64, Relaxed);
            self.dev.counters.rx_bytes.fetch_add(bytes, Relaxed);
        }
        n
    }

    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        let (mut n, mut bytes) = (0usize, 0u64);
        for p in pkts.as_slice() {
            let d = p.data();
            // SAFETY: `d` is a valid readable region; the fd is open.
            let r = unsafe {
                libc::write(
                    self.fd.as_raw_fd(),
                    d.as_ptr().cast::<libc::c_void>(),
                    d.len(),
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    self.dev.counters.tx_errors.fetch_add(1, Relaxed);
                }
                break;
            }
            bytes += d.len() as u64;
            n += 1;
        }
        pkts.drain_front(n);
        if n > 0 {
            self.dev.counters.tx_packets.fetch_add(n as u64, Relaxed);
            self.dev.counters.tx_bytes.fetch_add(bytes, Relaxed);
        }
        n
    }
}

fn open_queue(ifname: &str, multi: bool) -> Result<OwnedFd, PortError> {
    let path = CString::new("/dev/net/tun").map_err(|_| PortError::Config("path".into()))?;
    // SAFETY: plain open(2) of a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(PortError::io(
            "open /dev/net/tun (TAP ports need root or CAP_NET_ADMIN)",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: fd was just returned by open(2) and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReqFlags::new(ifname);
    req.flags = IFF_TAP | IFF_NO_PI | if multi { IFF_MULTI_QUEUE } else { 0 };
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `IfReqFlags` lays out
    // (40 bytes, name then flags).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReqFlags) };
    if rc < 0 {
        return Err(PortError::io(
            format!("TUNSETIFF {ifname}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(fd)
}

fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: s was just returned by socket(2).
    Ok(unsafe { OwnedFd::from_raw_fd(s) })
}

fn if_flags(ifname: &str) -> io::Result<libc::c_short> {
    let s = ctl_socket()?;
    let mut req = IfReqFlags::new(ifname);
    // SAFETY: SIOCGIFFLAGS fills the flags member of the ifreq we pass.
    let rc = unsafe {
        libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            &mut req as *mut IfReqFlags,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req.flags)
}

fn set_up(ifname: &str) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut req = IfReqFlags::new(ifname);
    req.flags = if_flags(ifname)? | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the flags member of the ifreq we pass.
    let rc = unsafe {
        libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCSIFFLAGS,
            &mut req as *mut IfReqFlags,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens (creating if needed) TAP device `ifname` with `queues` queues, brings its link
/// up, and draws buffers from `pool`. `name` is the port's configured name.
pub fn open(name: &str, ifname: &str, queues: u16, pool: &Pool) -> Result<Opened, PortError> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains(['/', ' ', '\0']) {
        return Err(PortError::Config(format!(
            "port {name}: TAP name {ifname:?} must be 1..15 bytes without '/', spaces or NUL"
        )));
    }
    let queues = queues.max(1);
    let fds = (0..queues)
        .map(|_| open_queue(ifname, queues > 1))
        .collect::<Result<Vec<_>, _>>()?;
    set_up(ifname).map_err(|e| PortError::io(format!("bring {ifname} up"), e))?;
    let dev = Arc::new(TapDev {
        name: name.to_string(),
        ifname: ifname.to_string(),
        mac: super::mac_from_name(ifname),
        queues,
        counters: Counters::default(),
    });
    Ok(Opened {
        port: dev.clone() as Arc<dyn Port>,
        queues: fds
            .into_iter()
            .map(|fd| {
                Box::new(TapQueue {
                    dev: dev.clone(),
                    fd,
                    pool: pool.clone(),
                    spare: None,
                }) as Box<dyn Queue>
            })
            .collect(),
    })
}

/// A blocking-free raw TAP fd for benchmarks that compare against a plain read/write loop
/// (returns the fd of a single-queue TAP device, link up).
pub fn open_raw(ifname: &str) -> Result<OwnedFd, PortError> {
    let fd = open_queue(ifname, false)?;
    set_up(ifname).map_err(|e| PortError::io(format!("bring {ifname} up"), e))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        let pool = Pool::new(4);
        assert!(matches!(
            open("p", "this-name-is-too-long", 1, &pool),
            Err(PortError::Config(_))
        ));
        assert!(matches!(open("p", "", 1, &pool), Err(PortError::Config(_))));
        assert!(matches!(
            open("p", "a/b", 1, &pool),
            Err(PortError::Config(_))
        ));
    }
}
