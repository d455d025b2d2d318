//! Whether this is a CI run. Shared by the build script and the test helpers.

/// True when `CI` is set as CI services set it: there a missing `dist/` or tool fails the
/// end-to-end tests instead of skipping them.
pub fn in_ci() -> bool {
    means_ci(std::env::var("CI").ok().as_deref())
}

/// Whether a value of `CI` names a CI run: any value but none, empty, `0` or `false`.
fn means_ci(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v, "" | "0" | "false"))
}

#[cfg(test)]
mod tests {
    use super::means_ci;

    #[test]
    fn ci_values() {
        for v in ["true", "1", "yes"] {
            assert!(means_ci(Some(v)), "{v}");
        }
        assert!(!means_ci(None));
        for v in ["", "0", "false"] {
            assert!(!means_ci(Some(v)), "{v:?}");
        }
    }
}
