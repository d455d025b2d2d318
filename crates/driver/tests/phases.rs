//! ompcc's phases called as a library, without the binary or a compiler: the command line
//! read into a plan, and the requests refused before anything runs.

use ompcc::args::{self, Action, Mode};
use ompcc::cli;

fn argv(line: &str) -> Vec<String> {
    std::iter::once("ompcc").chain(line.split_whitespace()).map(String::from).collect()
}

#[test]
fn a_command_line_becomes_a_plan() {
    let a = args::parse("ompcc", &argv("-fopenmp --offload-arch=sm_80 -O2 -c a.c -o a.o")[1..]).unwrap();
    assert_eq!(a.action, Action::Build);
    assert_eq!(a.mode, Mode::Compile);
    assert_eq!(a.output.as_deref(), Some("a.o"));
    assert_eq!(a.inputs.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(), ["a.c"]);
    assert_eq!(a.targets.len(), 1);
    assert_eq!(a.targets[0].triple, "nvptx64-nvidia-cuda");
    assert_eq!(a.targets[0].opts, vec![vec!["-march=sm_80".to_string()]]);
    assert!(a.host_opts().any(|o| o[0] == "-O2"), "-O2 stays a host option");

    let a =
        args::parse("ompcc", &argv("-fopenmp -fsyntax-only --target-offload=x86_64-pc-linux-gnu -DX --host a.c")[1..])
            .unwrap();
    assert_eq!(a.mode, Mode::SyntaxOnly);
    assert_eq!(a.targets[0].opts, vec![vec!["-DX".to_string()]], "the group's option is the target's alone");
    assert!(a.host_opts().all(|o| o[0] != "-DX"));
}

#[test]
fn bad_requests_are_one_error_before_anything_runs() {
    let e = cli::run(&argv("-fopenmp --target-offload=sparc-sun-solaris a.c")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unsupported offload target 'sparc-sun-solaris' (supported: x86_64-pc-linux-gnu, nvptx64-nvidia-cuda, amdgcn-amd-amdhsa)"
    );
    let e = cli::run(&argv("--clang=/nonexistent -fopenmp a.c")).unwrap_err();
    assert!(e.to_string().starts_with("clang '/nonexistent' not found: install clang-22"), "{e}");
    let e = cli::run(&argv("-fopenmp")).unwrap_err();
    assert_eq!(e.to_string(), "no input files");
}

#[test]
fn offload_list_of_a_missing_file_is_status_1() {
    let missing = std::env::temp_dir().join(format!("ompcc-phases-missing-{}.o", std::process::id()));
    let line = format!("--offload-list {}", missing.display());
    assert_eq!(cli::run(&argv(&line)).unwrap(), 1);
    assert_eq!(cli::main(&argv(&line)), 1);
}
