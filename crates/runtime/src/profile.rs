//! `LIBOMPTARGET_PROFILE=<file>`: a Chrome Trace Event file (opens in Perfetto,
//! chrome://tracing and speedscope) with a span for every region, kernel, allocation and
//! copy; and `LIBOMPTARGET_PROFILE_SUMMARY=1`: per-kernel and per-direction totals on stderr.
//! The file is written once, at exit or before a mandatory-offload abort, and is always
//! complete JSON.

use crate::trace::{Direction, End, Event, EventCx, EventKind, Interest, Kinds, Observer, TargetKind};
use omp_sync::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use omp_format::json::quote;

/// What a span was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Init,
    ImageLoad,
    Region,
    Kernel,
    Alloc,
    Free,
    HostToDevice,
    DeviceToHost,
}

impl Category {
    fn name(self) -> &'static str {
        match self {
            Category::Init => "init",
            Category::ImageLoad => "image",
            Category::Region => "region",
            Category::Kernel => "kernel",
            Category::Alloc => "alloc",
            Category::Free => "free",
            Category::HostToDevice => "HostToDevice",
            Category::DeviceToHost => "DeviceToHost",
        }
    }
}

/// One recorded span.
#[derive(Debug, Clone)]
pub struct Span {
    pub cat: Category,
    pub name: String,
    pub device: i32,
    pub bytes: u64,
    pub args: Vec<(&'static str, String)>,
}

#[derive(Debug)]
struct Record {
    span: Span,
    start_ns: u64,
    dur_ns: u64,
    tid: u64,
}

#[derive(Default, Debug, Clone, Copy)]
struct Totals {
    calls: u64,
    ns: u64,
    bytes: u64,
}

/// Collects spans in memory; written out by [`Profiler::finish`].
pub struct Profiler {
    path: Option<String>,
    summary: bool,
    origin: Instant,
    records: Mutex<Vec<Record>>,
    done: Mutex<bool>,
}

fn thread_id() -> u64 {
    thread_local!(static ID: u64 = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::thread::current().id().hash(&mut h);
        h.finish() % 100_000
    });
    ID.with(|i| *i)
}

/// Writes `bytes` into the file at `path` as the user named it: symlinks are followed and
/// FIFOs and devices are written to, never replaced (no temporary file, no rename). A
/// regular file is truncated first, unless it is the file our own stdout or stderr goes to
/// (`/dev/stdout` redirected to a file): then the trace goes through that stream, after what
/// the program wrote, instead of clobbering it.
fn write_into(path: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt as _;
    // Not truncated on open: a regular file is emptied below unless it is our stdout/stderr.
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    let meta = f.metadata()?;
    if meta.is_file() {
        let same =
            |fd: &str| std::fs::metadata(fd).map(|m| m.dev() == meta.dev() && m.ino() == meta.ino()).unwrap_or(false);
        if same("/proc/self/fd/1") {
            let mut out = std::io::stdout().lock();
            return out.write_all(bytes).and_then(|_| out.flush());
        }
        if same("/proc/self/fd/2") {
            return std::io::stderr().lock().write_all(bytes);
        }
        f.set_len(0)?;
    }
    f.write_all(bytes)?;
    f.flush()
}

impl Profiler {
    /// A profiler when either the file or the summary was asked for.
    pub fn new(path: Option<String>, summary: bool) -> Option<Self> {
        (path.is_some() || summary).then(|| Self {
            path,
            summary,
            origin: Instant::now(),
            records: Mutex::new(Vec::new()),
            done: Mutex::new(false),
        })
    }

    /// Nanoseconds since the profiler started.
    #[inline]
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    pub fn record(&self, span: Span, start_ns: u64, end_ns: u64) {
        let r = Record { span, start_ns, dur_ns: end_ns.saturating_sub(start_ns), tid: thread_id() };
        self.records.lock().push(r);
    }

    /// The trace as Chrome Trace Event JSON.
    pub fn json(&self) -> String {
        let records = self.records.lock();
        let pid = std::process::id();
        let mut s = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        let _ = write!(
            s,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"libomptarget\"}}}}"
        );
        for r in records.iter() {
            let _ = write!(
                s,
                ",\n{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{},\"args\":{{\"device\":{}",
                quote(&r.span.name),
                r.span.cat.name(),
                r.start_ns as f64 / 1000.0,
                r.dur_ns as f64 / 1000.0,
                r.tid,
                r.span.device
            );
            if r.span.bytes > 0 {
                let _ = write!(s, ",\"bytes\":{}", r.span.bytes);
            }
            for (k, v) in &r.span.args {
                let _ = write!(s, ",{}:{}", quote(k), quote(v));
            }
            s.push_str("}}");
        }
        s.push_str("\n]}\n");
        s
    }

    /// The summary table: per kernel and per copy direction.
    pub fn summary_table(&self) -> String {
        let records = self.records.lock();
        let mut by: BTreeMap<(Category, String), Totals> = BTreeMap::new();
        for r in records.iter() {
            let key = match r.span.cat {
                Category::Kernel => (Category::Kernel, r.span.name.clone()),
                c @ (Category::HostToDevice | Category::DeviceToHost | Category::Alloc | Category::Free) => {
                    (c, String::new())
                }
                _ => continue,
            };
            let t = by.entry(key).or_default();
            t.calls += 1;
            t.ns += r.dur_ns;
            t.bytes += r.span.bytes;
        }
        let mut s = String::from("omptarget profile summary:\n");
        let _ = writeln!(
            s,
            "  {:<14} {:<44} {:>8} {:>12} {:>11} {:>14} {:>9}",
            "kind", "name", "calls", "total (ms)", "mean (us)", "bytes", "GB/s"
        );
        for ((cat, name), t) in by {
            let mean_us = t.ns as f64 / t.calls as f64 / 1000.0;
            let gbs = if t.ns > 0 && t.bytes > 0 { format!("{:.2}", t.bytes as f64 / t.ns as f64) } else { "-".into() };
            let bytes = if t.bytes > 0 { t.bytes.to_string() } else { "-".into() };
            let shown = if name.len() > 44 { format!("…{}", &name[name.len() - 43..]) } else { name };
            let _ = writeln!(
                s,
                "  {:<14} {:<44} {:>8} {:>12.3} {:>11.2} {:>14} {:>9}",
                cat.name(),
                shown,
                t.calls,
                t.ns as f64 / 1e6,
                mean_us,
                bytes,
                gbs
            );
        }
        s
    }

    /// Writes the file and the summary, once.
    pub fn finish(&self) {
        let mut done = self.done.lock();
        if *done {
            return;
        }
        *done = true;
        if let Some(path) = &self.path {
            if let Err(e) = write_into(path, self.json().as_bytes()) {
                crate::info::emit(&format!(
                    "omptarget warning: cannot write LIBOMPTARGET_PROFILE file '{path}': {e}\n"
                ));
            }
        }
        if self.summary {
            crate::info::emit(&self.summary_table());
        }
    }
}

impl Profiler {
    fn record_interval(&self, span: Span, time: crate::trace::Interval) {
        let ns = |t: Instant| t.saturating_duration_since(self.origin).as_nanos() as u64;
        self.record(span, ns(time.start), ns(time.end));
    }
}

/// The profile as an observer: a span for every event that has a duration.
impl Observer for Profiler {
    /// The events that have a duration, with their intervals; the file and summary at exit.
    fn interest(&self) -> Interest {
        use EventKind::*;
        Interest {
            kinds: Kinds::of(&[BinaryRegistered, ImageLoaded, Construct, Alloc, Free, Transfer, Kernel]),
            timing: true,
            at_exit: true,
        }
    }

    fn finish(&self, end: End) {
        if end == End::Exit {
            Profiler::finish(self);
        }
    }

    fn event(&self, ev: &Event, _cx: &EventCx) {
        let var = crate::info::var_name;
        let (span, time) = match *ev {
            Event::BinaryRegistered { time: Some(t) } => {
                (Span { cat: Category::Init, name: "register binary".into(), device: -1, bytes: 0, args: vec![] }, t)
            }
            Event::ImageLoaded { device, image, triple, entries, time: Some(t), .. } => (
                Span {
                    cat: Category::ImageLoad,
                    name: format!("load image ({})", if triple.is_empty() { "unknown" } else { triple }),
                    device,
                    bytes: image.len() as u64,
                    args: vec![("entries", entries.to_string())],
                },
                t,
            ),
            Event::Construct { kind, begin: false, device, loc, time: Some(t), .. } => {
                let name = match kind {
                    TargetKind::Target => "target",
                    TargetKind::EnterData => "target data begin",
                    TargetKind::ExitData => "target data end",
                    TargetKind::Update => "target update",
                };
                let args = vec![("location", loc.parse().to_string())];
                (Span { cat: Category::Region, name: name.into(), device, bytes: 0, args }, t)
            }
            Event::Alloc { device, bytes, name, time: Some(t), .. } => {
                let span =
                    Span { cat: Category::Alloc, name: var(name).into(), device, bytes: bytes as u64, args: vec![] };
                (span, t)
            }
            Event::Free { device, bytes, name, time: Some(t), .. } => {
                let span =
                    Span { cat: Category::Free, name: var(name).into(), device, bytes: bytes as u64, args: vec![] };
                (span, t)
            }
            Event::Transfer { device, dir, bytes, name, done: Some(t), .. } => {
                let cat = match dir {
                    Direction::ToDevice => Category::HostToDevice,
                    Direction::FromDevice => Category::DeviceToHost,
                };
                (Span { cat, name: var(name).into(), device, bytes: bytes as u64, args: vec![] }, t)
            }
            Event::Kernel { device, kernel, loc, teams, threads, args, done: Some(t), .. } => (
                Span {
                    cat: Category::Kernel,
                    name: kernel.into(),
                    device,
                    bytes: 0,
                    args: vec![
                        ("location", loc.parse().to_string()),
                        ("num_teams", teams.to_string()),
                        ("thread_limit", threads.to_string()),
                        ("arguments", args.len().to_string()),
                    ],
                },
                t,
            ),
            _ => return,
        };
        self.record_interval(span, time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_summary() {
        let p = Profiler::new(None, true).unwrap();
        p.record(
            Span {
                cat: Category::Kernel,
                name: "k\"1".into(),
                device: 0,
                bytes: 0,
                args: vec![("loc", "a.c:3:1".into())],
            },
            1000,
            5000,
        );
        p.record(Span { cat: Category::HostToDevice, name: "x".into(), device: 0, bytes: 4000, args: vec![] }, 0, 2000);
        let j = p.json();
        assert!(j.contains("\"name\":\"k\\\"1\""), "{j}");
        assert!(j.contains("\"ts\":1.000,\"dur\":4.000"), "{j}");
        assert!(j.trim_end().ends_with("]}"));
        let s = p.summary_table();
        assert!(s.contains("HostToDevice"), "{s}");
        assert!(s.contains("2.00"), "{s}"); // 4000 bytes in 2000 ns = 2 GB/s
    }
}
