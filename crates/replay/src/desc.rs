//! A record's description (`NAME.json`, written by `LIBOMPTARGET_RECORD` on an isolated
//! device): parsed and checked for consistency before anything is mapped or loaded. Every
//! count, size and offset must agree with the others and (in [`Record::open`]) with the
//! files beside it; a description that lies is a [`ReplayError`], never a wrong mapping.

use crate::ReplayError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The record format this replay reads (the plugin's `FormatVersion`).
pub const FORMAT_VERSION: u64 = 1;

/// One live device allocation at the launch: its address, size, and where its bytes are in
/// `.record_input` / `.record_output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub addr: usize,
    pub size: usize,
    pub file_offset: u64,
}

/// One kernel argument: its value, and the allocation and offset it points into, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    pub value: usize,
    pub points_into: Option<(usize, usize)>,
}

/// A checked description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    pub producer: String,
    pub name: String,
    pub device: u64,
    pub image: String,
    pub image_size: u64,
    pub num_teams: u32,
    pub num_threads: u32,
    pub with_dyn_ptr: bool,
    pub arena_addr: usize,
    pub arena_size: usize,
    pub libraries: Vec<PathBuf>,
    pub args: Vec<Arg>,
    pub input: String,
    /// The memory after the kernel; none for a launch that failed.
    pub output: Option<String>,
    /// How the recorded launch failed (its worker died), for a record of such a launch.
    pub fault: Option<Fault>,
    /// `.globals`, the image's device globals before the launch, when it has any.
    pub globals: Option<String>,
    pub variables: Vec<Variable>,
    pub memory_size: u64,
    pub allocations: Vec<Allocation>,
}

/// A device global (`declare target` variable) of the image: its name, size, and where its
/// bytes are in `.globals`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    pub name: String,
    pub size: usize,
    pub file_offset: u64,
}

/// A record of a launch that failed: the error it failed with, and whether its memory is as
/// the failure left it (the launch was not chosen for recording) or from before the launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub reason: String,
    pub memory_after_fault: bool,
}

fn bad(what: impl std::fmt::Display) -> ReplayError {
    ReplayError::new(format!("the description is not a valid record: {what}"))
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, ReplayError> {
    v.get(key).ok_or_else(|| bad(format!("\"{key}\" is missing")))
}

fn number(v: &Value, key: &str) -> Result<u64, ReplayError> {
    field(v, key)?.as_u64().ok_or_else(|| bad(format!("\"{key}\" is not a non-negative integer")))
}

fn small(v: &Value, key: &str) -> Result<u32, ReplayError> {
    u32::try_from(number(v, key)?).map_err(|_| bad(format!("\"{key}\" is too large")))
}

fn size(v: &Value, key: &str) -> Result<usize, ReplayError> {
    usize::try_from(number(v, key)?).map_err(|_| bad(format!("\"{key}\" is too large")))
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, ReplayError> {
    field(v, key)?.as_str().ok_or_else(|| bad(format!("\"{key}\" is not a string")))
}

/// `"0x…"`: an address or argument value.
fn address(v: &Value, key: &str) -> Result<usize, ReplayError> {
    let s = field(v, key)?.as_str().ok_or_else(|| bad(format!("\"{key}\" is not a hexadecimal address (\"0x…\")")))?;
    s.strip_prefix("0x")
        .and_then(|h| usize::from_str_radix(h, 16).ok())
        .ok_or_else(|| bad(format!("\"{key}\" is not a hexadecimal address (\"0x…\"): {s:?}")))
}

/// A file beside the description: a plain file name, never a path elsewhere.
fn sibling(v: &Value, key: &str) -> Result<String, ReplayError> {
    let s = text(v, key)?;
    if s.is_empty() || s.contains('/') || s == "." || s == ".." {
        return Err(bad(format!("\"{key}\" must name a file beside the description, not {s:?}")));
    }
    Ok(s.to_string())
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>, ReplayError> {
    field(v, key)?.as_array().ok_or_else(|| bad(format!("\"{key}\" is not an array")))
}

impl Description {
    /// Parses and checks a description's text.
    pub fn parse(text_: &str) -> Result<Description, ReplayError> {
        let v: Value = serde_json::from_str(text_).map_err(|e| bad(format!("not JSON ({e})")))?;
        if !v.is_object() {
            return Err(bad("not a JSON object"));
        }
        let producer = v.get("Producer").and_then(Value::as_str).unwrap_or("an unknown producer").to_string();
        let version = number(&v, "FormatVersion")?;
        if version != FORMAT_VERSION {
            return Err(ReplayError::new(format!(
                "the record was written by {producer} in record format {version}; this omp-replay reads format \
                 {FORMAT_VERSION}: record it again with this build's runtime"
            )));
        }
        let arena_addr = address(&v, "VAllocAddr")?;
        let arena_size = size(&v, "VAllocSize")?;
        let arena_end = arena_addr.checked_add(arena_size).ok_or_else(|| bad("the device memory range overflows"))?;
        let mut allocations = Vec::new();
        let mut offset = 0u64;
        let mut last_end = arena_addr;
        for (i, a) in array(&v, "Allocations")?.iter().enumerate() {
            let addr = address(a, "Addr")?;
            let sz = size(a, "Size")?;
            let file_offset = number(a, "FileOffset")?;
            let end = addr.checked_add(sz).ok_or_else(|| bad(format!("allocation {i} overflows")))?;
            if addr < arena_addr || end > arena_end {
                return Err(bad(format!(
                    "allocation {i} (0x{addr:x}, {sz} bytes) lies outside the device memory (0x{arena_addr:x}, \
                     {arena_size} bytes)"
                )));
            }
            if addr < last_end && i > 0 {
                return Err(bad(format!("allocation {i} (0x{addr:x}) overlaps or precedes allocation {}", i - 1)));
            }
            if file_offset != offset {
                return Err(bad(format!(
                    "allocation {i} says its bytes start at {file_offset}, they start at {offset}"
                )));
            }
            offset += sz as u64;
            last_end = end;
            allocations.push(Allocation { addr, size: sz, file_offset });
        }
        let memory_size = number(&v, "MemorySize")?;
        if memory_size != offset {
            return Err(bad(format!("\"MemorySize\" is {memory_size}, the allocations add up to {offset}")));
        }
        let num_args = number(&v, "NumArgs")?;
        let mut args = Vec::new();
        for (i, a) in array(&v, "Args")?.iter().enumerate() {
            let value = address(a, "Value")?;
            let points_into = match a.get("Allocation") {
                None => None,
                Some(_) => {
                    let k = size(a, "Allocation")?;
                    let off = size(a, "Offset")?;
                    let al = allocations.get(k).ok_or_else(|| {
                        bad(format!("argument {i} points into allocation {k}, there are {}", allocations.len()))
                    })?;
                    if off >= al.size.max(1) || al.addr.checked_add(off) != Some(value) {
                        return Err(bad(format!(
                            "argument {i} (0x{value:x}) is not at offset {off} of allocation {k} (0x{:x}, {} bytes)",
                            al.addr, al.size
                        )));
                    }
                    Some((k, off))
                }
            };
            args.push(Arg { value, points_into });
        }
        if args.len() as u64 != num_args {
            return Err(bad(format!("\"NumArgs\" is {num_args}, \"Args\" holds {}", args.len())));
        }
        let libraries = match v.get("Libraries") {
            None => Vec::new(),
            Some(l) => l
                .as_array()
                .ok_or_else(|| bad("\"Libraries\" is not an array"))?
                .iter()
                .map(|p| p.as_str().map(PathBuf::from).ok_or_else(|| bad("\"Libraries\" holds a non-string")))
                .collect::<Result<_, _>>()?,
        };
        let fault = match v.get("Fault") {
            None => None,
            Some(_) => Some(Fault {
                reason: text(&v, "Fault")?.to_string(),
                memory_after_fault: field(&v, "InputAfterFault")?
                    .as_bool()
                    .ok_or_else(|| bad("\"InputAfterFault\" is not a boolean"))?,
            }),
        };
        // Only a launch that failed has no memory after the kernel.
        let output = match (&fault, v.get("Output")) {
            (Some(_), None) => None,
            _ => Some(sibling(&v, "Output")?),
        };
        let (globals, variables) = match v.get("Globals") {
            None => (None, Vec::new()),
            Some(_) => {
                let mut vars = Vec::new();
                let mut offset = 0u64;
                for (i, g) in array(&v, "GlobalVariables")?.iter().enumerate() {
                    let file_offset = number(g, "FileOffset")?;
                    if file_offset != offset {
                        return Err(bad(format!(
                            "global variable {i} says its bytes start at {file_offset}, they start at {offset}"
                        )));
                    }
                    let size = size(g, "Size")?;
                    offset = offset.checked_add(size as u64).ok_or_else(|| bad("the global variables overflow"))?;
                    vars.push(Variable { name: text(g, "Name")?.to_string(), size, file_offset });
                }
                (Some(sibling(&v, "Globals")?), vars)
            }
        };
        Ok(Description {
            producer,
            name: text(&v, "Name")?.to_string(),
            device: number(&v, "DeviceId")?,
            image: sibling(&v, "Image")?,
            image_size: number(&v, "ImageSize")?,
            num_teams: small(&v, "NumTeams")?,
            num_threads: small(&v, "NumThreads")?,
            with_dyn_ptr: field(&v, "WithDynPtr")?.as_bool().ok_or_else(|| bad("\"WithDynPtr\" is not a boolean"))?,
            arena_addr,
            arena_size,
            libraries,
            args,
            input: sibling(&v, "Input")?,
            output,
            fault,
            globals,
            variables,
            memory_size,
            allocations,
        })
    }
}

/// A description and the paths of its files, each checked against the sizes it gives.
#[derive(Debug)]
pub struct Record {
    pub desc: Description,
    pub image: PathBuf,
    pub input: PathBuf,
    /// The image's device globals before the launch, when it has any.
    pub globals: Option<PathBuf>,
    /// The memory after the kernel (none for a launch that failed).
    pub output: Option<PathBuf>,
}

impl Record {
    /// Reads `path` and checks the files beside it: the image's size, and the memory files'
    /// (the output only when `need_output`, for `--verify`: a record of a launch that failed
    /// has none, which is then an error).
    pub fn open(path: &Path, need_output: bool) -> Result<Record, ReplayError> {
        // A description is a few KiB per allocation: anything larger is not one of ours.
        const MAX_DESCRIPTION: u64 = 64 << 20;
        let cannot = |e: std::io::Error| ReplayError::new(format!("cannot read {}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(cannot)?.len();
        if len > MAX_DESCRIPTION {
            return Err(ReplayError::new(format!(
                "{} holds {len} bytes, more than a record's description ever does ({MAX_DESCRIPTION})",
                path.display()
            )));
        }
        let text_ = std::fs::read_to_string(path).map_err(cannot)?;
        let desc = Description::parse(&text_).map_err(|e| e.context(&path.display().to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let check = |name: &str, want: u64, what: &str| -> Result<PathBuf, ReplayError> {
            let p = dir.join(name);
            let len = std::fs::metadata(&p)
                .map_err(|e| ReplayError::new(format!("cannot read {} ({what}): {e}", p.display())))?
                .len();
            if len != want {
                return Err(ReplayError::new(format!(
                    "{} ({what}) holds {len} bytes, the description says {want}: the record is truncated or not \
                     this description's",
                    p.display()
                )));
            }
            Ok(p)
        };
        let image = check(&desc.image, desc.image_size, "the device image")?;
        let input = check(&desc.input, desc.memory_size, "the device memory before the launch")?;
        let output = match (&desc.output, &desc.fault) {
            (Some(o), _) if need_output => Some(check(o, desc.memory_size, "the device memory after the launch")?),
            (Some(o), _) => Some(dir.join(o)),
            (None, Some(f)) if need_output => {
                return Err(ReplayError::new(format!(
                    "{}: the recorded launch failed ({}), so there is no memory after the kernel to verify against",
                    path.display(),
                    f.reason
                )))
            }
            (None, _) => None,
        };
        let globals = match &desc.globals {
            Some(g) => {
                let total: u64 = desc.variables.iter().map(|v| v.size as u64).sum();
                Some(check(g, total, "the device globals before the launch")?)
            }
            None => None,
        };
        Ok(Record { desc, image, input, globals, output })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
  "FormatVersion": 1, "Producer": "omprs 0.1.0", "Name": "k", "DeviceId": 0,
  "Image": "k.image", "ImageSize": 5, "NumTeams": 0, "NumThreads": 0, "LoopTripCount": 0,
  "SharedMemorySize": 0, "WithDynPtr": true, "VAllocAddr": "0x200000000000", "VAllocSize": 1048576,
  "Libraries": ["/lib/libomp.so"], "NumArgs": 2,
  "Args": [ { "Value": "0x200000001010", "Allocation": 0, "Offset": 16 }, { "Value": "0x7" } ],
  "Input": "k.record_input", "Output": "k.record_output", "MemorySize": 96,
  "Allocations": [ { "Addr": "0x200000001000", "Size": 64, "FileOffset": 0 },
                   { "Addr": "0x200000001040", "Size": 32, "FileOffset": 64 } ]
}"#;

    fn with(from: &str, to: &str) -> Result<Description, ReplayError> {
        assert!(GOOD.contains(from), "{from}");
        Description::parse(&GOOD.replace(from, to))
    }

    fn err(from: &str, to: &str) -> String {
        with(from, to).unwrap_err().to_string()
    }

    #[test]
    fn a_good_description_parses() {
        let d = Description::parse(GOOD).unwrap();
        assert_eq!(d.name, "k");
        assert_eq!(d.args[0], Arg { value: 0x2000_0000_1010, points_into: Some((0, 16)) });
        assert_eq!(d.args[1], Arg { value: 7, points_into: None });
        assert_eq!(d.allocations[1], Allocation { addr: 0x2000_0000_1040, size: 32, file_offset: 64 });
        assert_eq!(d.libraries, vec![PathBuf::from("/lib/libomp.so")]);
    }

    #[test]
    fn a_record_of_a_failed_launch_has_no_output_and_says_how_it_failed() {
        let failed = GOOD.replace(
            "\"Output\": \"k.record_output\",",
            "\"Fault\": \"worker ended: killed by signal 11 (SIGSEGV)\", \"InputAfterFault\": true,",
        );
        let d = Description::parse(&failed).unwrap();
        assert_eq!(d.output, None);
        let f = d.fault.unwrap();
        assert!(f.memory_after_fault && f.reason.ends_with("(SIGSEGV)"), "{f:?}");
        // Without "Fault", "Output" is required; "Fault" needs "InputAfterFault".
        assert!(err("\"Output\": \"k.record_output\", ", "").contains("\"Output\" is missing"));
        let half = GOOD.replace("\"Output\": \"k.record_output\",", "\"Fault\": \"x\",");
        assert!(Description::parse(&half).unwrap_err().to_string().contains("\"InputAfterFault\" is missing"));
    }

    #[test]
    fn globals_are_read_and_checked() {
        let with = GOOD.replace(
            "\"MemorySize\": 96,",
            "\"Globals\": \"k.globals\", \"GlobalVariables\": [ { \"Name\": \"scale\", \"Addr\": \"0x5000\", \
             \"Size\": 8, \"FileOffset\": 0 }, { \"Name\": \"n\", \"Size\": 4, \"FileOffset\": 8 } ], \"MemorySize\": 96,",
        );
        let d = Description::parse(&with).unwrap();
        assert_eq!(d.globals.as_deref(), Some("k.globals"));
        assert_eq!(d.variables[1], Variable { name: "n".into(), size: 4, file_offset: 8 });
        let lying = with.replace("\"FileOffset\": 8 }", "\"FileOffset\": 9 }");
        let e = Description::parse(&lying).unwrap_err().to_string();
        assert!(e.contains("global variable 1 says its bytes start at 9, they start at 8"), "{e}");
        assert!(Description::parse(GOOD).unwrap().globals.is_none());
    }

    #[test]
    fn a_description_that_lies_is_refused_with_what_is_wrong() {
        assert!(err("\"MemorySize\": 96", "\"MemorySize\": 97").contains("\"MemorySize\" is 97"));
        assert!(err("\"NumArgs\": 2", "\"NumArgs\": 3").contains("\"NumArgs\" is 3, \"Args\" holds 2"));
        assert!(err("\"FileOffset\": 64", "\"FileOffset\": 60").contains("start at 60, they start at 64"));
        assert!(err("\"Addr\": \"0x200000001040\"", "\"Addr\": \"0x200000001020\"").contains("overlaps"));
        assert!(err("\"VAllocSize\": 1048576", "\"VAllocSize\": 4096").contains("outside the device memory"));
        assert!(err("\"Offset\": 16", "\"Offset\": 8").contains("argument 0"));
        assert!(err("\"Allocation\": 0", "\"Allocation\": 5").contains("there are 2"));
        assert!(err("\"Size\": 32", "\"Size\": 18446744073709551615").contains("allocation 1"));
        assert!(err("\"Image\": \"k.image\"", "\"Image\": \"/etc/passwd\"").contains("beside the description"));
        assert!(err("\"Input\": \"k.record_input\"", "\"Input\": \"..\"").contains("beside the description"));
        assert!(err("\"VAllocAddr\": \"0x200000000000\"", "\"VAllocAddr\": 35184372088832").contains("hexadecimal"));
        assert!(err("\"WithDynPtr\": true", "\"WithDynPtr\": 1").contains("boolean"));
        assert!(err("\"NumTeams\": 0", "\"NumTeams\": -1").contains("non-negative"));
        assert!(err("\"NumTeams\": 0", "\"NumTeams\": 4294967296").contains("too large"));
        assert!(err("\"Name\": \"k\", ", "").contains("\"Name\" is missing"));
    }

    #[test]
    fn another_format_or_not_json_is_a_clear_error() {
        let e = err("\"FormatVersion\": 1", "\"FormatVersion\": 2");
        assert!(e.contains("written by omprs 0.1.0 in record format 2"), "{e}");
        assert!(Description::parse("").unwrap_err().to_string().contains("not JSON"));
        assert!(Description::parse("[1]").unwrap_err().to_string().contains("not a JSON object"));
        assert!(Description::parse(&GOOD[..GOOD.len() / 2]).unwrap_err().to_string().contains("not JSON"));
    }

    #[test]
    fn the_files_must_have_the_sizes_the_description_gives() {
        let dir = std::env::temp_dir().join(format!("omp-replay-desc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let desc = dir.join("k.json");
        std::fs::write(&desc, GOOD).unwrap();
        std::fs::write(dir.join("k.image"), b"IMAGE").unwrap();
        std::fs::write(dir.join("k.record_input"), [0u8; 96]).unwrap();
        std::fs::write(dir.join("k.record_output"), [0u8; 90]).unwrap();
        assert!(Record::open(&desc, false).is_ok());
        let e = Record::open(&desc, true).unwrap_err().to_string();
        assert!(
            e.contains("k.record_output (the device memory after the launch) holds 90 bytes, the description says 96"),
            "{e}"
        );
        std::fs::write(dir.join("k.record_input"), [0u8; 10]).unwrap();
        let e = Record::open(&desc, false).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        std::fs::remove_file(dir.join("k.image")).unwrap();
        let e = Record::open(&desc, false).unwrap_err().to_string();
        assert!(e.contains("k.image (the device image)"), "{e}");
        // A description larger than any record writes is refused before it is read (a sparse
        // file: no disk used).
        std::fs::File::create(&desc).unwrap().set_len(65 << 20).unwrap();
        let e = Record::open(&desc, false).unwrap_err().to_string();
        assert!(e.contains("more than a record's description ever does"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
