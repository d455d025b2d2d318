//! `omp-replay DESC.json [--verify] [--check] [--teams N] [--threads N] [--repeat N]`: runs one kernel
//! launch recorded with `LIBOMPTARGET_RECORD` on an isolated device (docs/replay.md).

use omp_replay::check;
use omp_replay::kernel::{self, Kernel};
use omp_replay::memory::{self, DeviceMemory};
use omp_replay::{Record, ReplayError};
use std::fs::File;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: omp-replay DESC.json [--verify] [--check] [--teams N] [--threads N] [--repeat N]

Runs one kernel launch recorded with LIBOMPTARGET_RECORD=DIR (LIBOMPTARGET_ISOLATE=1) again, in
this process, with the device memory restored at its recorded addresses. A launch that failed
on an isolated device is recorded by itself (in $TMPDIR/omp-records-PID without
LIBOMPTARGET_RECORD; its error names the record): its replay runs to the same fault.

  --verify      compare the device memory after the kernel with the recording
                (exit status 1 and the first differing byte when they differ)
  --check       report an access of the kernel outside the recorded allocations: the
                address, read or written, and the allocation it is nearest to (exit status 1)
  --teams N     run N teams, in place of the kernel's num_teams clause or the default
  --threads N   run N threads per team (and parallel region), in place of the kernel's
                thread_limit and num_threads clauses or the default
  --repeat N    run the kernel N times, each from the recorded memory, and print each time
  --version     print the version and the record format it reads
  --help        print this help";

struct Options {
    desc: PathBuf,
    verify: bool,
    check: bool,
    teams: Option<u32>,
    threads: Option<u32>,
    repeat: u32,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { desc: PathBuf::new(), verify: false, check: false, teams: None, threads: None, repeat: 1 };
    let mut desc = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut count = |flag: &str| -> Result<u32, String> {
            let v = it.next().ok_or_else(|| format!("{flag} needs a number"))?;
            v.parse::<u32>().map_err(|_| format!("{flag} needs a number, not '{v}'"))
        };
        match a.as_str() {
            "--verify" => o.verify = true,
            "--check" => o.check = true,
            "--teams" => o.teams = Some(count("--teams")?),
            "--threads" => o.threads = Some(count("--threads")?),
            "--repeat" => o.repeat = count("--repeat")?.max(1),
            f if f.starts_with('-') && f.len() > 1 => return Err(format!("unknown option '{f}'")),
            d if desc.is_none() => desc = Some(PathBuf::from(d)),
            d => return Err(format!("one description at a time ('{d}' is a second)")),
        }
    }
    o.desc = desc.ok_or("no description given")?;
    Ok(o)
}

fn open(path: &std::path::Path) -> Result<File, ReplayError> {
    File::open(path).map_err(|e| ReplayError::new(format!("cannot read {}: {e}", path.display())))
}

fn flush_c_output() {
    // SAFETY: fflush(NULL) flushes the C streams the kernel may have written; no pointer of ours.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

/// Where the image loaded here holds each recorded device global: its own variable of that
/// name and size, or an error naming the one that is not.
fn variables(k: &Kernel, d: &omp_replay::Description) -> Result<Vec<usize>, ReplayError> {
    d.variables
        .iter()
        .map(|v| match k.variable(&v.name) {
            Some((addr, size)) if size == v.size => Ok(addr),
            Some((_, size)) => Err(ReplayError::new(format!(
                "the device image's global {} has {size} bytes, the record {}: the record is not this image's",
                v.name, v.size
            ))),
            None => Err(ReplayError::new(format!(
                "the device image defines no global {}: the record is not this image's",
                v.name
            ))),
        })
        .collect()
}

fn replay(o: &Options) -> Result<bool, ReplayError> {
    let record = Record::open(&o.desc, o.verify)?;
    let d = &record.desc;
    let input = open(&record.input)?;
    let output = match &record.output {
        Some(path) if o.verify => Some(open(path)?),
        _ => None,
    };
    let args: Vec<usize> = d.args.iter().map(|a| a.value).collect();
    let memory = DeviceMemory::map(&d.allocations)?;
    kernel::preload(&d.libraries);
    let k = Kernel::load(&record.image, &d.name, d.with_dyn_ptr, &args)?;
    let globals = match &record.globals {
        Some(path) => Some((open(path)?, variables(&k, d)?)),
        None => None,
    };
    omp_replay::shape::set(o.teams, o.threads);
    println!(
        "omp-replay: kernel {} ({} arguments), {} allocations ({} bytes) at their recorded addresses",
        d.name,
        d.args.len(),
        d.allocations.len(),
        d.memory_size
    );
    if let Some(f) = &d.fault {
        let memory = if f.memory_after_fault {
            "as the failure left it, not as it was before the launch"
        } else {
            "as it was before the launch"
        };
        println!("omp-replay: the recorded launch failed ({}); its device memory is {memory}", f.reason);
    }
    if o.check {
        check::watch_faults(&d.allocations);
    }
    // Runs after the first restore from a copy kept in memory: a plain memcpy, not a read
    // through the page cache. Read before the first run, so that no run's restore counts it.
    let saved = if o.repeat > 1 { Some(memory::read_input(&input)?) } else { None };
    for run in 1..=o.repeat {
        let t0 = Instant::now();
        match &saved {
            Some(bytes) if run > 1 => memory.restore_from(bytes),
            _ => memory.restore(&input)?,
        }
        if let Some((file, places)) = &globals {
            for (v, &addr) in d.variables.iter().zip(places) {
                // SAFETY: `addr` is the image's own variable of `v.size` bytes (checked by
                // `variables`), written by no one else while no kernel runs.
                unsafe { memory::read_at(file, addr, v.size, v.file_offset) }?;
            }
        }
        let t1 = Instant::now();
        // SAFETY: the recorded memory is mapped and restored just above.
        unsafe { k.run() };
        let t2 = Instant::now();
        flush_c_output();
        if o.repeat > 1 {
            println!(
                "run {run}: kernel {:.3} ms (restore {:.3} ms)",
                (t2 - t1).as_secs_f64() * 1e3,
                (t1 - t0).as_secs_f64() * 1e3
            );
        }
    }
    if o.check {
        // SAFETY: the recorded memory's pages are mapped, and the kernel has returned.
        match unsafe { check::written_outside(memory.ranges(), &d.allocations) } {
            Some(finding) => {
                eprintln!("{finding}");
                return Ok(false);
            }
            None => println!("omp-replay: check: no access outside the recorded allocations"),
        }
    }
    let Some(output) = output else { return Ok(true) };
    match memory.compare(&output)? {
        None => {
            println!("omp-replay: verified: the device memory after the kernel matches the recording");
            Ok(true)
        }
        Some(diff) => {
            println!(
                "omp-replay: verification failed: allocation {} (0x{:x}, {} bytes) differs at offset {}: recorded \
                 0x{:02x}, replayed 0x{:02x}",
                diff.allocation, diff.addr, diff.size, diff.offset, diff.recorded, diff.replayed
            );
            Ok(false)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version") {
        println!("omp-replay {} (record format {})", env!("CARGO_PKG_VERSION"), omp_replay::desc::FORMAT_VERSION);
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("omp-replay: error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match replay(&o) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("omp-replay: error: {e}");
            ExitCode::from(2)
        }
    }
}
