//! The shim's settings, read from the environment once, at load
//! (`docs/shim.md`, "Tunables").

use std::ffi::CString;
use std::sync::OnceLock;

/// Where a report goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    Stderr,
    /// Appended to this file (opened per line: an fd kept open could be
    /// closed under us by the application's `close_range`).
    File(CString),
}

#[derive(Debug, Clone)]
pub struct Config {
    /// `ZN_SHIM=0`: attach nothing (counted as `disabled`).
    pub enabled: bool,
    /// `ZN_SHIM_LOG=1` (stderr) or `=path`: a line per attach and per
    /// refusal.
    pub log: Option<Dest>,
    /// `ZN_SHIM_STATS=-` (stderr) or `=path`: the counters at exit.
    pub stats: Option<Dest>,
}

fn dest(v: Option<String>, stderr_words: &[&str]) -> Option<Dest> {
    let v = v.filter(|v| !v.is_empty() && v != "0")?;
    if stderr_words.contains(&v.as_str()) {
        return Some(Dest::Stderr);
    }
    CString::new(v).ok().map(Dest::File)
}

impl Config {
    fn from_env(get: impl Fn(&str) -> Option<String>) -> Self {
        Config {
            enabled: get("ZN_SHIM").is_none_or(|v| v != "0"),
            log: dest(get("ZN_SHIM_LOG"), &["1", "-"]),
            stats: dest(get("ZN_SHIM_STATS"), &["-"]),
        }
    }
}

/// The settings. First called from the library's constructor, so the
/// wrappers (which may run in a signal handler) never allocate here.
pub fn get() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| Config::from_env(|k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Config {
        Config::from_env(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_and_switches() {
        let c = with(&[]);
        assert!(c.enabled && c.log.is_none() && c.stats.is_none());
        assert!(!with(&[("ZN_SHIM", "0")]).enabled);
        assert!(with(&[("ZN_SHIM", "1")]).enabled);
        assert_eq!(with(&[("ZN_SHIM_LOG", "1")]).log, Some(Dest::Stderr));
        assert_eq!(with(&[("ZN_SHIM_LOG", "0")]).log, None);
        assert_eq!(
            with(&[("ZN_SHIM_LOG", "/tmp/x")]).log,
            Some(Dest::File(CString::new("/tmp/x").unwrap()))
        );
        assert_eq!(with(&[("ZN_SHIM_STATS", "-")]).stats, Some(Dest::Stderr));
        // "1" is a file name for the counters, as it always was.
        assert!(matches!(
            with(&[("ZN_SHIM_STATS", "1")]).stats,
            Some(Dest::File(_))
        ));
    }
}
