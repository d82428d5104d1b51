//! perftest's client output (ib_write_bw, ib_send_lat over rdma_cm): the
//! result line under the "#bytes" header.
//!
//! Bandwidth: throughput is #iterations × size over the measured window
//! (-D), not perftest's own BW columns (cycles over a CPU clock it
//! estimates, which under TCG fails and prints 0.00); CPU is the guest's
//! busy CPU-seconds per second over the client's run per GiB per second.
//! Latency: perftest's one-way figures (half a round trip), doubled.

use crate::pyfmt::{float, is_digits, repr};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// The result line: the first line with at least `min_fields` fields and a
/// number first after the (last) "#bytes" header.
pub fn result_row(text: &str, min_fields: usize) -> Option<Vec<&str>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut row = None;
    for (i, l) in lines.iter().enumerate() {
        if l.trim().starts_with("#bytes") {
            if let Some(f) = lines[i + 1..]
                .iter()
                .map(|m| m.split_whitespace().collect::<Vec<_>>())
                .find(|f| f.len() >= min_fields && is_digits(f[0]))
            {
                row = Some(f);
            }
        }
    }
    row
}

fn num(w: &str) -> Result<f64> {
    float(w).with_context(|| format!("could not convert string to float: {w:?}"))
}

fn int(w: &str) -> Result<u64> {
    w.parse()
        .with_context(|| format!("invalid literal for int(): {w:?}"))
}

/// What ib_write_bw measured.
#[derive(Debug, PartialEq)]
pub struct Bw {
    pub msg_size: u64,
    pub bits_per_second: f64,
    /// None if nothing moved.
    pub cpu_s_per_gib: Option<f64>,
}

/// ib_write_bw's output, the CPU file ("busy0 total0 busy1 total1 wall0
/// wall1 hz") and the window in seconds.
pub fn parse_bw(txt: &str, cpu: &str, window: &str) -> Result<Bw> {
    let row = result_row(txt, 4).context("no result line")?;
    let (size, iters) = (int(row[0])?, int(row[1])?);
    let window = num(window)?;
    let c: Vec<f64> = cpu.split_whitespace().map(num).collect::<Result<_>>()?;
    let [b0, _t0, b1, _t1, w0, w1, hz] = c[..] else {
        bail!("{} numbers in the CPU file, not 7", c.len());
    };
    if hz == 0.0 || w1 == w0 || window == 0.0 {
        bail!("float division by zero");
    }
    let util = (b1 - b0) / hz / (w1 - w0);
    let bps = (size as u128 * iters as u128 * 8) as f64 / window;
    Ok(Bw {
        msg_size: size,
        bits_per_second: bps,
        cpu_s_per_gib: (bps > 0.0).then(|| util / (bps / 8.0 / 1073741824.0)),
    })
}

impl Bw {
    /// The words for `record` (an empty cpu_s_per_gib= if nothing moved).
    pub fn words(&self) -> String {
        format!(
            "bits_per_second={} cpu_s_per_gib={} msg_size={}\n",
            repr(self.bits_per_second),
            self.cpu_s_per_gib.map_or_else(String::new, repr),
            self.msg_size
        )
    }
}

/// `perftest-bw`'s words for `record`.
pub fn bw(txt: &Path, cpu: &Path, window: &str) -> Result<String> {
    Ok(parse_bw(&super::read(txt)?, &super::read(cpu)?, window)?.words())
}

/// ib_send_lat's figures, round trips in µs.
#[derive(Debug, PartialEq)]
pub struct Lat {
    /// As perftest printed it.
    pub msg_size: String,
    pub min: f64,
    pub typical: f64,
    pub p99: f64,
    pub p999: f64,
}

/// #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%.
pub fn parse_lat(txt: &str) -> Result<Lat> {
    let row = result_row(txt, 9).context("no result line")?;
    let v: Vec<f64> = row[2..9]
        .iter()
        .map(|w| num(w).map(|x| 2.0 * x))
        .collect::<Result<_>>()?;
    if !v.iter().all(|x| x.is_finite()) {
        bail!("perftest could not estimate the CPU clock (r^2 < 0.9 under TCG): no figure");
    }
    Ok(Lat {
        msg_size: row[0].to_string(),
        min: v[0],
        typical: v[2],
        p99: v[5],
        p999: v[6],
    })
}

impl Lat {
    /// The words for `record`.
    pub fn words(&self) -> String {
        format!(
            "lat_min_us={} lat_p50_us={} lat_p99_us={} lat_p999_us={} msg_size={}\n",
            repr(self.min),
            repr(self.typical),
            repr(self.p99),
            repr(self.p999),
            self.msg_size
        )
    }
}

/// `perftest-lat`'s words for `record`.
pub fn lat(txt: &Path) -> Result<String> {
    Ok(parse_lat(&super::read(txt)?)?.words())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ib_write_bw -R -F -D 7 -f 1 -s 65536 over rxe, TCG's clock warning.
    pub const WRITE_BW: &str = "\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : rxe_a
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: ON
 TX depth        : 128
 CQ Moderation   : 100
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
 rdma_cm QPs\t : ON
 Data ex. method : rdma_cm
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0011 PSN 0x7a1b2c
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:01
 remote address: LID 0000 QPN 0x0012 PSN 0x3d4e5f
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:02
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
Conflicting CPU frequency values detected: 2495.312000 != 2600.000000. CPU Frequency is not max.
 65536      27341            0.00               0.00   \t\t   0.000000
---------------------------------------------------------------------------------------
";

    /// ib_send_lat -R -F -n 1000 -s 64 (one-way µs).
    pub const SEND_LAT: &str = "\
---------------------------------------------------------------------------------------
                    Send Latency Test
 Dual-port       : OFF\t\tDevice         : siw_a
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      1000          45.12          1312.45      60.33     \t       65.21        \t12.34   \t\t150.22  \t\t301.115 
---------------------------------------------------------------------------------------
";

    // Expected: bench-guest's python3 (rdma_bw, rdma_lat) on the same files.
    #[test]
    fn write_bw() {
        assert_eq!(
            parse_bw(WRITE_BW, "100 400 700 1600 10.5 19.75 100", "5").unwrap(),
            Bw {
                msg_size: 65536,
                bits_per_second: 2866911641.6,
                cpu_s_per_gib: Some(1.943502333392974),
            }
        );
        assert_eq!(
            parse_bw(WRITE_BW, "100 400 700 1600 10.5 19.75 100", "5")
                .unwrap()
                .words(),
            "bits_per_second=2866911641.6 cpu_s_per_gib=1.943502333392974 msg_size=65536\n"
        );
        let zero = WRITE_BW.replace(" 27341 ", " 0 ");
        assert_eq!(
            parse_bw(&zero, "100 400 700 1600 10.5 19.75 100", "5")
                .unwrap()
                .words(),
            "bits_per_second=0.0 cpu_s_per_gib= msg_size=65536\n"
        );
        let e = parse_bw("error: Unable to read from rdma_cm\n", "1 2 3 4 5 6 7", "5");
        assert_eq!(e.unwrap_err().to_string(), "no result line");
    }

    #[test]
    fn send_lat() {
        assert_eq!(
            parse_lat(SEND_LAT).unwrap(),
            Lat {
                msg_size: "64".into(),
                min: 90.24,
                typical: 120.66,
                p99: 300.44,
                p999: 602.23,
            }
        );
        assert_eq!(
            parse_lat(SEND_LAT).unwrap().words(),
            "lat_min_us=90.24 lat_p50_us=120.66 lat_p99_us=300.44 lat_p999_us=602.23 msg_size=64\n"
        );
        let inf = SEND_LAT.replace("60.33", "inf");
        assert_eq!(
            parse_lat(&inf).unwrap_err().to_string(),
            "perftest could not estimate the CPU clock (r^2 < 0.9 under TCG): no figure"
        );
        assert_eq!(
            parse_lat(WRITE_BW).unwrap_err().to_string(),
            "no result line"
        );
    }
}
