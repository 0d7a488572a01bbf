//! What a repository path is: the `--path` filters that select paths.

use anyhow::{Context, Result};
use globset::{GlobBuilder, GlobMatcher};

/// Compiles a `--path` filter. A pattern without glob characters is a path
/// prefix: a directory or a file.
pub fn compile_path_glob(pattern: &str) -> Result<GlobMatcher> {
    let pattern = pattern.trim().trim_start_matches("./");
    let has_meta = pattern.contains(['*', '?', '[', '{']);
    let pattern = if has_meta {
        pattern.to_string()
    } else {
        format!(
            "{{{},{}/**}}",
            pattern.trim_end_matches('/'),
            pattern.trim_end_matches('/')
        )
    };
    Ok(GlobBuilder::new(&pattern)
        .literal_separator(false)
        .build()
        .with_context(|| format!("invalid --path pattern `{pattern}`"))?
        .compile_matcher())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_globs_and_prefixes() {
        let m = compile_path_glob("src/auth").unwrap();
        assert!(m.is_match("src/auth/jwt.rs"));
        assert!(m.is_match("src/auth"));
        assert!(!m.is_match("src/authz/x.rs"));
        let m = compile_path_glob("*.py").unwrap();
        assert!(m.is_match("a/b/c.py"));
        assert!(!m.is_match("a/b/c.rs"));
        assert!(compile_path_glob("src/[").is_err());
    }
}
