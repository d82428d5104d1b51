//! One line of results.jsonl: `zn-bench-report record SECTION TRANSPORT
//! LOSS OK NOTE RAW [KEY=VALUE...]`, the normalised form of one
//! measurement that the report (report.rs) reads:
//!
//! ```text
//! {"section": "main"|"lat"|"loss"|"sweep", "transport": NAME, "loss": PERCENT,
//!  "ok": bool, "note": TEXT, "raw": FILE, "bits_per_second": F|null,
//!  "cpu_s_per_gib": F|null, "lat_p50_us": F|null, "lat_p99_us": F|null,
//!  "lat_min_us": F|null, "lat_p999_us": F|null, "msg_size": F|null, ...}
//! ```
//!
//! Every value is a float (msg_size too) or null (an empty value, `None`,
//! `null`, or one that is not finite); keys other than the standard ones
//! follow in the order given (the breakdown of section main). The format
//! is Python's `json.dumps` of the dict the inline python3 built (pyfmt.rs).

use crate::pyfmt;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// The keys every line has, null unless given, in this order.
const STANDARD: &[&str] = &[
    "bits_per_second",
    "cpu_s_per_gib",
    "lat_p50_us",
    "lat_p99_us",
    "lat_min_us",
    "lat_p999_us",
    "msg_size",
];

/// One measurement, as results.jsonl has it.
#[derive(Debug, PartialEq)]
pub struct Record {
    pub section: String,
    pub transport: String,
    pub loss: f64,
    pub ok: bool,
    /// Bytes as they came (a tool's error line may be anything).
    pub note: Vec<u8>,
    pub raw: String,
    /// (key, value) in the line's order: STANDARD, then the others given.
    pub values: Vec<(String, Option<f64>)>,
}

impl Record {
    /// From bench-guest's arguments.
    pub fn parse(args: &[OsString]) -> Result<Self> {
        if args.len() < 6 {
            bail!("usage: record SECTION TRANSPORT LOSS OK NOTE RAW [KEY=VALUE...]");
        }
        let s = |i: usize| args[i].to_string_lossy().into_owned();
        let loss = pyfmt::float(&s(2)).with_context(|| format!("loss {:?}", s(2)))?;
        let mut values: Vec<(String, Option<f64>)> =
            STANDARD.iter().map(|k| (k.to_string(), None)).collect();
        for kv in &args[6..] {
            let kv = kv.to_string_lossy();
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("{kv:?}: not KEY=VALUE"))?;
            let v = match v {
                "" | "None" | "null" => None,
                v => Some(pyfmt::float(v).with_context(|| format!("{k}={v}: not a number"))?),
            }
            .filter(|x| x.is_finite());
            match values.iter_mut().find(|(key, _)| key == k) {
                Some(slot) => slot.1 = v,
                None => values.push((k.to_string(), v)),
            }
        }
        Ok(Record {
            section: s(0),
            transport: s(1),
            loss,
            ok: s(3) == "1",
            note: args[4].as_bytes().to_vec(),
            raw: s(5),
            values,
        })
    }

    /// The JSON line (with its newline).
    pub fn json(&self) -> String {
        let st = |x: &str| pyfmt::json_str(x.as_bytes());
        let mut s = format!(
            "{{\"section\": {}, \"transport\": {}, \"loss\": {}, \"ok\": {}, \"note\": {}, \"raw\": {}",
            st(&self.section),
            st(&self.transport),
            pyfmt::json_float(self.loss),
            self.ok,
            pyfmt::json_str(&self.note),
            st(&self.raw)
        );
        for (k, v) in &self.values {
            s.push_str(&format!(
                ", {}: {}",
                st(k),
                v.map_or_else(|| "null".into(), pyfmt::json_float)
            ));
        }
        s.push_str("}\n");
        s
    }
}

/// `record`'s output: the line for results.jsonl.
pub fn line(args: &[OsString]) -> Result<String> {
    Ok(Record::parse(args)?.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(args: &[&str]) -> String {
        let a: Vec<OsString> = args.iter().map(OsString::from).collect();
        line(&a).unwrap()
    }

    // The expected lines are what bench-guest's python3 record() printed for
    // the same arguments.
    #[test]
    fn a_zn_perf_row_with_its_breakdown() {
        assert_eq!(
            rec(&[
                "main",
                "zeronic",
                "0",
                "1",
                "",
                "main-zeronic.json",
                "bits_per_second=1523456789.123",
                "cpu_s_per_gib=2.5",
                "msg_size=65536",
                "user_s_per_gib=0.1234",
                "irqs_per_mib=1e-05",
            ]),
            r#"{"section": "main", "transport": "zeronic", "loss": 0.0, "ok": true, "note": "", "raw": "main-zeronic.json", "bits_per_second": 1523456789.123, "cpu_s_per_gib": 2.5, "lat_p50_us": null, "lat_p99_us": null, "lat_min_us": null, "lat_p999_us": null, "msg_size": 65536.0, "user_s_per_gib": 0.1234, "irqs_per_mib": 1e-05}"#
                .to_owned()
                + "\n"
        );
    }

    #[test]
    fn a_failure_and_nulls() {
        assert_eq!(
            rec(&[
                "loss",
                "rxe",
                "0.1",
                "0",
                "ib_write_bw failed: \"x\" µs",
                "loss0_1-rxe.txt",
                "cpu_s_per_gib=",
                "lat_p50_us=None",
                "lat_p99_us=inf",
                "bits_per_second=nan",
            ]),
            r#"{"section": "loss", "transport": "rxe", "loss": 0.1, "ok": false, "note": "ib_write_bw failed: \"x\" \u00b5s", "raw": "loss0_1-rxe.txt", "bits_per_second": null, "cpu_s_per_gib": null, "lat_p50_us": null, "lat_p99_us": null, "lat_min_us": null, "lat_p999_us": null, "msg_size": null}"#
                .to_owned()
                + "\n"
        );
    }

    #[test]
    fn bad_words_write_nothing() {
        let a: Vec<OsString> = ["main", "tcp", "0", "1", "", "x", "novalue"]
            .iter()
            .map(OsString::from)
            .collect();
        assert!(line(&a).is_err());
        assert!(line(&a[..5]).is_err());
    }
}
