//! Source locations in clang's `;file;function;line;column;;` strings (`ident_t::psource`
//! and map names).

/// A parsed location string. Fields borrow the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceLocation<'a> {
    /// For map names, the variable's spelling; for `ident_t`, empty.
    pub name: &'a str,
    pub file: &'a str,
    pub function: &'a str,
    pub line: u32,
    pub column: u32,
}

impl<'a> SourceLocation<'a> {
    /// Parses an `ident_t` string `;file;function;line;column;;`.
    pub fn from_ident(s: &'a str) -> Self {
        let mut it = s.split(';').skip(1);
        let file = it.next().unwrap_or("unknown");
        let function = it.next().unwrap_or("unknown");
        let line = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let column = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        Self { name: "", file, function, line, column }
    }

    /// Parses a map name `;name;file;line;column;;`. A string without `;` is a bare name
    /// (global entries use their symbol name).
    pub fn from_map_name(s: &'a str) -> Self {
        if !s.starts_with(';') {
            return Self { name: s, file: "unknown", function: "unknown", line: 0, column: 0 };
        }
        let mut it = s.split(';').skip(1);
        let name = it.next().unwrap_or("unknown");
        let file = it.next().unwrap_or("unknown");
        let line = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let column = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        Self { name, file, function: "unknown", line, column }
    }

    /// True when the compiler recorded a line or column (it did with `-g`).
    pub fn is_known(&self) -> bool {
        self.line != 0 || self.column != 0
    }

    /// The file name without its directories, as LLVM prints it.
    pub fn file_name(&self) -> &'a str {
        self.file.rsplit('/').next().unwrap_or(self.file)
    }
}

impl std::fmt::Display for SourceLocation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file_name(), self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ident() {
        let l = SourceLocation::from_ident(";dir/example.c;main;18;1;;");
        assert_eq!((l.file_name(), l.function, l.line, l.column), ("example.c", "main", 18, 1));
        assert!(l.is_known());
        assert!(!SourceLocation::from_ident(";unknown;unknown;0;0;;").is_known());
        assert_eq!(SourceLocation::from_ident("").file, "unknown");
    }

    #[test]
    fn map_names() {
        let l = SourceLocation::from_map_name(";a[0:n];example.c;14;7;;");
        assert_eq!((l.name, l.line, l.column), ("a[0:n]", 14, 7));
        assert_eq!(SourceLocation::from_map_name("gvar").name, "gvar");
        assert_eq!(l.to_string(), "example.c:14:7");
    }
}
