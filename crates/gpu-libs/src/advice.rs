//! What to say about a function device code may not call: how to name it and what to do
//! instead (shared by `ompcc --gpu-check` and `LIBOMPTARGET_CHECK=gpu`, so both say the same).

/// What to do instead of calling `sym` (a symbol name, mangled for C++) in device code, by
/// what the function is.
pub fn what_to_do(sym: &str) -> &'static str {
    const IO: &[&str] = &[
        "fopen", "fclose", "fprintf", "fputs", "fputc", "fwrite", "fread", "fflush", "fscanf", "fgets", "fgetc",
        "puts", "putchar", "scanf", "sscanf", "getchar", "perror", "open", "close", "read", "write",
    ];
    const END: &[&str] = &["abort", "exit", "_Exit", "quick_exit", "_FortranAStopStatement", "_FortranAExit"];
    if sym.starts_with("_FortranAio") {
        "do the I/O on the host, after the target region"
    } else if IO.contains(&sym) {
        "do the I/O on the host, after the target region (printf works on the device)"
    } else if END.contains(&sym) {
        "a kernel cannot end the program: set a flag the host checks after the region (or __builtin_trap())"
    } else if sym.starts_with("_FortranA") {
        "flang's runtime is not built for the GPU: keep the statement or intrinsic that calls it out of device code"
    } else if sym.starts_with("_Z") {
        "keep std:: types and streams out of device code (plain new and delete work there)"
    } else {
        "call it on the host, or give the device its own definition inside 'declare target'"
    }
}

/// `std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::size() const`
/// → `std::string::size`: the library's long spellings shortened, the parameters left out.
pub fn short_cxx_name(name: &str) -> String {
    const SHORT: [(&str, &str); 4] = [
        ("std::__cxx11::", "std::"),
        ("std::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"),
        ("std::basic_ostream<char, std::char_traits<char> >", "std::ostream"),
        ("std::basic_istream<char, std::char_traits<char> >", "std::istream"),
    ];
    // LLVM 22's demangler closes templates with `>>`, LLVM 19's with `> >`.
    let mut s = name.replace(">>", "> >").replace(">>", "> >");
    for (long, short) in SHORT {
        s = s.replace(long, short);
    }
    let trimmed = s.trim_end_matches(" const").trim_end();
    if trimmed.ends_with(')') {
        let mut depth = 0i32;
        for (i, c) in trimmed.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        // `operator()` keeps its own parentheses.
                        let head = &trimmed[..i];
                        return if head.ends_with("operator") || head.is_empty() { s } else { head.to_string() };
                    }
                }
                _ => {}
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_function_has_its_advice() {
        assert!(what_to_do("fopen").starts_with("do the I/O on the host"));
        assert!(what_to_do("_FortranAioBeginOpenUnit").starts_with("do the I/O on the host"));
        assert!(what_to_do("exit").starts_with("a kernel cannot end the program"));
        assert!(what_to_do("_Znwm").starts_with("keep std:: types"));
        assert!(what_to_do("strtok").starts_with("call it on the host"));
    }
}
