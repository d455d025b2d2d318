//! Which compile or link phases an option belongs to, so each tool gets only what it uses.

/// The phases an option is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Dependency-file generation (`-MD -MF …`): the host front end only.
    Deps,
    /// Preprocessor options (`-I -D -U -include …`): every front end.
    Preproc,
    /// Other front-end options (`-std= -W… -pedantic`): every front end.
    Frontend,
    /// Linker options (`-L -l -Wl, -shared …`): links only.
    Link,
    /// Everything else (`-O -g -f… -m… -pthread`): compiles and links.
    Both,
}

/// Classifies an option (with its separate value, if any).
pub fn classify(opt: &[String]) -> Class {
    let o = opt[0].as_str();
    const DEPS: &[&str] = &["-M", "-MM", "-MD", "-MMD", "-MF", "-MT", "-MQ", "-MP", "-MG"];
    const LINK_EXACT: &[&str] = &[
        "-shared",
        "-static",
        "-static-libgcc",
        "-static-libstdc++",
        "-static-pie",
        "-rdynamic",
        "-nostdlib",
        "-nodefaultlibs",
        "-nostartfiles",
        "-s",
        "-pie",
        "-no-pie",
        "-u",
        "-z",
        "-T",
        "-Xlinker",
        "-r",
        "-e",
    ];
    if DEPS.contains(&o) {
        return Class::Deps;
    }
    if LINK_EXACT.contains(&o) || o.starts_with("-Wl,") || o.starts_with("-L") || o.starts_with("-l") {
        return Class::Link;
    }
    if o.starts_with("-I")
        || o.starts_with("-D")
        || o.starts_with("-U")
        || o.starts_with("-Wp,")
        || matches!(
            o,
            "-include" | "-imacros" | "-isystem" | "-idirafter" | "-iquote" | "-iprefix" | "-isysroot" | "-nostdinc"
        )
        || o.starts_with("-isystem")
        || o.starts_with("-J")
        || o == "-module-dir"
        || o == "-Xpreprocessor"
    {
        return Class::Preproc;
    }
    if o.starts_with("-std=")
        || (o.starts_with("-W") && !o.starts_with("-Wa,"))
        || o.starts_with("-pedantic")
        || matches!(o, "-w" | "-ansi" | "-Xclang" | "-Xflang" | "-C" | "-P" | "-trigraphs")
    {
        return Class::Frontend;
    }
    Class::Both
}

/// True for options that name a machine (`-march=`, `-mavx2`): they reach a device compile only
/// when the device has the host's architecture.
pub fn is_machine_specific(opt: &[String]) -> bool {
    opt[0].starts_with("-m") && opt[0] != "-module-dir"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Class {
        classify(&s.split(' ').map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn classes() {
        assert_eq!(c("-Iinc"), Class::Preproc);
        assert_eq!(c("-I inc"), Class::Preproc);
        assert_eq!(c("-DX=1"), Class::Preproc);
        assert_eq!(c("-MF dep.d"), Class::Deps);
        assert_eq!(c("-MD"), Class::Deps);
        assert_eq!(c("-std=c11"), Class::Frontend);
        assert_eq!(c("-Wall"), Class::Frontend);
        assert_eq!(c("-Wl,-rpath,/x"), Class::Link);
        assert_eq!(c("-lm"), Class::Link);
        assert_eq!(c("-L/x"), Class::Link);
        assert_eq!(c("-O2"), Class::Both);
        assert_eq!(c("-g"), Class::Both);
        assert_eq!(c("-fPIC"), Class::Both);
        assert!(is_machine_specific(&["-march=native".to_string()]));
        assert!(!is_machine_specific(&["-O2".to_string()]));
    }
}
