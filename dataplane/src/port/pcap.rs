//! pcap ports: a capture file replayed as rx (once, in order, then nothing), and tx written
//! to a capture file. Also plain helpers to read and write captures (tests compare
//! captures packet by packet).
//!
//! Format: classic libpcap, Ethernet link type; read in either byte order with micro- or
//! nanosecond timestamps; written little-endian with microseconds.

use super::{Burst, LinkState, Opened, Pool, Port, PortError, PortStats, Queue};
use crate::wire::MacAddr;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const LINKTYPE_ETHERNET: u32 = 1;
/// Records longer than this are rejected when reading (a corrupt length field, not a
/// packet).
const MAX_RECORD: u32 = 262_144;

/// A capture being read record by record.
pub struct Reader<R: Read> {
    r: R,
    swapped: bool,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the global header (Ethernet captures only).
    pub fn new(mut r: R) -> io::Result<Reader<R>> {
        let mut h = [0u8; 24];
        r.read_exact(&mut h)?;
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let swapped = match magic {
            MAGIC_US | MAGIC_NS => false,
            m if m.swap_bytes() == MAGIC_US || m.swap_bytes() == MAGIC_NS => true,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not a pcap file",
                ))
            }
        };
        let rd = |b: [u8; 4]| {
            if swapped {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let linktype = rd([h[20], h[21], h[22], h[23]]);
        if linktype != LINKTYPE_ETHERNET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("pcap link type {linktype}, only Ethernet (1) is supported"),
            ));
        }
        Ok(Reader { r, swapped })
    }

    fn u32(&self, b: [u8; 4]) -> u32 {
        if self.swapped {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// Reads the next record into `buf` (resized to the captured length). `Ok(false)` at a
    /// clean end of file.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> io::Result<bool> {
        let mut h = [0u8; 16];
        match self.r.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(e),
        }
        let incl = self.u32([h[8], h[9], h[10], h[11]]);
        if incl > MAX_RECORD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("pcap record of {incl} bytes"),
            ));
        }
        buf.resize(incl as usize, 0);
        self.r.read_exact(buf)?;
        Ok(true)
    }
}

/// A capture being written.
pub struct Writer<W: Write> {
    w: W,
}

impl<W: Write> Writer<W> {
    /// Writes the global header.
    pub fn new(mut w: W) -> io::Result<Writer<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_US.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.write_all(&h)?;
        Ok(Writer { w })
    }

    /// Appends one record stamped with the current time.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(now.as_secs() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&now.subsec_micros().to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(data.len() as u32).to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(data)
    }

    /// Flushes buffered records.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// Reads every packet of a capture file.
pub fn read_file(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let mut r = Reader::new(BufReader::new(File::open(path)?))?;
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while r.next_into(&mut buf)? {
        out.push(buf.clone());
    }
    Ok(out)
}

/// Writes packets to a new capture file.
pub fn write_file<'a>(path: &Path, pkts: impl IntoIterator<Item = &'a [u8]>) -> io::Result<()> {
    let mut w = Writer::new(BufWriter::new(File::create(path)?))?;
    for p in pkts {
        w.write(p)?;
    }
    w.flush()
}

#[derive(Default)]
struct Counters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    rx_errors: AtomicU64,
    tx_errors: AtomicU64,
}

struct PcapDev {
    name: String,
    mac: MacAddr,
    counters: Counters,
}

impl Port for PcapDev {
    fn name(&self) -> &str {
        &self.name
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
    fn queues(&self) -> u16 {
        1
    }
    fn link(&self) -> LinkState {
        LinkState::Up { speed_mbps: 0 }
    }
    fn stats(&self) -> PortStats {
        let c = &self.counters;
        PortStats {
            rx_packets: c.rx_packets.load(Relaxed),
            rx_bytes: c.rx_bytes.load(Relaxed),
            tx_packets: c.tx_packets.load(Relaxed),
            tx_bytes: c.tx_bytes.load(Relaxed),
            rx_missed: 0,
            rx_errors: c.rx_errors.load(Relaxed),
            tx_errors: c.tx_errors.load(Relaxed),
        }
    }
}

struct PcapQueue {
    dev: Arc<PcapDev>,
    rx: Option<Reader<BufReader<File>>>,
    tx: Option<Writer<BufWriter<File>>>,
    pool: Pool,
    scratch: Vec<u8>,
}

impl Queue for PcapQueue {
    fn allocator(&self) -> Option<super::Allocator> {
        Some(self.pool.clone().into())
    }

    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        let Some(r) = self.rx.as_mut() else { return 0 };
        let mut n = 0;
        while !out.is_full() {
            match r.next_into(&mut self.scratch) {
                Ok(true) => {}
                Ok(false) => {
                    self.rx = None;
                    break;
                }
                Err(_) => {
                    self.dev.counters.rx_errors.fetch_add(1, Relaxed);
                    self.rx = None;
                    break;
                }
            }
            // A record larger than a buffer, or an empty pool: counted, skipped.
            let Some(p) = self.pool.alloc_copy(&self.scratch) else {
                self.dev.counters.rx_errors.fetch_add(1, Relaxed);
                continue;
            };
            self.dev.counters.rx_packets.fetch_add(1, Relaxed);
            self.dev
                .counters
                .rx_bytes
                .fetch_add(p.len() as u64, Relaxed);
            let _ = out.push(p);
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        let n = pkts.len();
        let mut bytes = 0u64;
        for p in pkts.drain() {
            bytes += p.len() as u64;
            if let Some(w) = self.tx.as_mut() {
                if w.write(p.data()).is_err() {
                    self.dev.counters.tx_errors.fetch_add(1, Relaxed);
                }
            }
        }
        if let Some(w) = self.tx.as_mut() {
            if w.flush().is_err() {
                self.dev.counters.tx_errors.fetch_add(1, Relaxed);
            }
        }
        self.dev.counters.tx_packets.fetch_add(n as u64, Relaxed);
        self.dev.counters.tx_bytes.fetch_add(bytes, Relaxed);
        n
    }
}

/// Opens a pcap port: `rx` is replayed once, `tx` is created (truncated) and written.
pub fn open(
    name: &str,
    rx: Option<&Path>,
    tx: Option<&Path>,
    pool: &Pool,
) -> Result<Opened, PortError> {
    let reader = match rx {
        Some(p) => Some(
            File::open(p)
                .and_then(|f| Reader::new(BufReader::new(f)))
                .map_err(|e| PortError::io(format!("port {name}: read {}", p.display()), e))?,
        ),
        None => None,
    };
    let writer = match tx {
        Some(p) => Some(
            File::create(p)
                .and_then(|f| Writer::new(BufWriter::new(f)))
                .map_err(|e| PortError::io(format!("port {name}: write {}", p.display()), e))?,
        ),
        None => None,
    };
    let dev = Arc::new(PcapDev {
        name: name.to_string(),
        mac: super::mac_from_name(name),
        counters: Counters::default(),
    });
    Ok(Opened {
        port: dev.clone() as Arc<dyn Port>,
        queues: vec![Box::new(PcapQueue {
            dev,
            rx: reader,
            tx: writer,
            pool: pool.clone(),
            scratch: Vec::with_capacity(super::DATA_ROOM),
        })],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_header_and_round_trip() {
        let mut buf = Vec::new();
        {
            let mut w = Writer::new(&mut buf).unwrap();
            w.write(&[1, 2, 3]).unwrap();
        }
        assert_eq!(
            &buf[..24],
            &[
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
        assert_eq!(&buf[24 + 8..24 + 16], &[3, 0, 0, 0, 3, 0, 0, 0]);
        let mut r = Reader::new(&buf[..]).unwrap();
        let mut rec = Vec::new();
        assert!(r.next_into(&mut rec).unwrap());
        assert_eq!(rec, [1, 2, 3]);
        assert!(!r.next_into(&mut rec).unwrap());
    }

    #[test]
    fn reads_big_endian_nanosecond_captures() {
        let mut f = vec![0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&[0, 0, 0xff, 0xff, 0, 0, 0, 1]);
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0xaa, 0xbb]);
        let mut r = Reader::new(&f[..]).unwrap();
        let mut rec = Vec::new();
        assert!(r.next_into(&mut rec).unwrap());
        assert_eq!(rec, [0xaa, 0xbb]);
    }

    #[test]
    fn rejects_garbage_and_other_link_types() {
        assert!(Reader::new(&[0u8; 24][..]).is_err());
        let mut f = Vec::new();
        Writer::new(&mut f).unwrap();
        f[20] = 101; // raw IP
        assert!(Reader::new(&f[..]).is_err());
        // A record header claiming a huge length.
        let mut f = Vec::new();
        Writer::new(&mut f).unwrap();
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]);
        let mut r = Reader::new(&f[..]).unwrap();
        assert!(r.next_into(&mut Vec::new()).is_err());
    }

    #[test]
    fn port_replays_and_captures() {
        let dir = std::env::temp_dir().join(format!("sluice-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (inp, outp) = (dir.join("in.pcap"), dir.join("out.pcap"));
        let pkts: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 64]).collect();
        write_file(&inp, pkts.iter().map(|p| &p[..])).unwrap();
        let pool = Pool::new(64);
        let mut o = open("p", Some(&inp), Some(&outp), &pool).unwrap();
        let mut b = Burst::new();
        let mut got = 0;
        loop {
            let n = o.queues[0].rx_burst(&mut b);
            if n == 0 {
                break;
            }
            got += n;
            assert_eq!(o.queues[0].tx_burst(&mut b), n);
        }
        assert_eq!(got, 40);
        drop(o);
        assert_eq!(read_file(&outp).unwrap(), pkts);
        assert_eq!(pool.in_use(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
