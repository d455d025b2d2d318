//! Dependency files (`-M -MM -MD -MMD -MF -MT -MQ -MP -MG`), named as clang's driver names them.
//!
//! ompcc's host front end writes to a temporary file, so the names clang would derive from its
//! `-o` are wrong there: ompcc derives them itself from the user's command line, as clang's
//! driver does, and passes them explicitly. With `-MD`/`-MMD` and no `-MF` the file is the `-o`
//! value with its extension replaced by `.d` (in every mode, linking too: `-MD a.c -o app`
//! writes `app.d`), else `<input stem>.d` in the current directory; without `-MT`/`-MQ` the
//! target is the `-o` value, else `<input stem>.o`. `-M`/`-MM` imply `-E` (the build stops after
//! the dependencies) and reach clang as given, with the user's own `-o`.

use crate::args::{Args, Input, Mode};
use crate::classify::{classify, Class};
use std::path::Path;

/// The dependency options for the host front end that compiles `input`.
pub fn host_args(args: &Args, input: &Input) -> Vec<String> {
    let given: Vec<&Vec<String>> = args.host_opts().filter(|o| classify(o) == Class::Deps).collect();
    let flat = || given.iter().flat_map(|o| o.iter().cloned()).collect::<Vec<String>>();
    let has = |names: &[&str]| given.iter().any(|o| names.contains(&o[0].as_str()));
    if given.is_empty() || args.mode == Mode::Preprocess || !has(&["-MD", "-MMD"]) {
        return flat();
    }
    let mut out = Vec::new();
    let stem = Path::new(&input.path).file_stem().map_or_else(|| "out".into(), |s| s.to_string_lossy().into_owned());
    if !has(&["-MF"]) {
        let file = match &args.output {
            Some(o) => Path::new(o).with_extension("d").to_string_lossy().into_owned(),
            None => format!("{stem}.d"),
        };
        out.extend(["-MF".to_string(), file]);
    }
    if !has(&["-MT", "-MQ"]) {
        out.extend(["-MT".to_string(), args.output.clone().unwrap_or_else(|| format!("{stem}.o"))]);
    }
    out.extend(flat());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps(cmd: &str) -> String {
        let v: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        let a = crate::args::parse("ompcc", &v).unwrap();
        host_args(&a, &a.inputs[0]).join(" ")
    }

    #[test]
    fn named_as_clang_names_them() {
        assert_eq!(deps("-MD -c src/a.c"), "-MF a.d -MT a.o -MD");
        assert_eq!(deps("-MMD -c src/a.c -o obj/x.o"), "-MF obj/x.d -MT obj/x.o -MMD");
        assert_eq!(deps("-MD src/a.c -o app"), "-MF app.d -MT app -MD");
        assert_eq!(deps("-MD -MF my.d -MT t -c a.c"), "-MD -MF my.d -MT t");
        assert_eq!(deps("-MMD -MP -MQ $t -c a.c"), "-MF a.d -MMD -MP -MQ $t");
        assert_eq!(deps("-c a.c"), "");
        // -M/-MM go to clang as given, and stop the build after preprocessing.
        assert_eq!(deps("-M -MT x a.c"), "-M -MT x");
        assert_eq!(crate::args::parse("ompcc", &["-MM".into(), "a.c".into()]).unwrap().mode, Mode::Preprocess);
    }
}
