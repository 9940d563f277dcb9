//! A tiny `--name value` / `--flag` option parser, enough for the tools here.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

pub struct Args {
    values: HashMap<String, String>,
    flags: HashSet<String>,
}

impl Args {
    /// Parse the process arguments: `options` take a value, `flags` do not
    /// (names without the leading `--`); anything else is an error.
    pub fn parse(options: &[&str], flags: &[&str]) -> Result<Args, String> {
        Self::parse_from(std::env::args().skip(1), options, flags)
    }

    pub fn parse_from<I>(args: I, options: &[&str], flags: &[&str]) -> Result<Args, String>
    where
        I: IntoIterator<Item = String>,
    {
        let mut parsed = Args { values: HashMap::new(), flags: HashSet::new() };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let name = arg.strip_prefix("--").ok_or_else(|| format!("unexpected argument {arg}"))?;
            if flags.contains(&name) {
                parsed.flags.insert(name.to_string());
            } else if options.contains(&name) {
                let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
                parsed.values.insert(name.to_string(), value);
            } else {
                return Err(format!("unknown option {arg}"));
            }
        }
        Ok(parsed)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }

    pub fn string(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The option parsed as `T`, or `default` when it was not given.
    pub fn get_or<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(raw) => raw.parse().map_err(|_| format!("bad value for --{name}: {raw:?}")),
        }
    }

    /// The option parsed as `T`; an error when it was not given.
    pub fn required<T: FromStr>(&self, name: &str) -> Result<T, String> {
        let raw = self.values.get(name).ok_or_else(|| format!("--{name} is required"))?;
        raw.parse().map_err(|_| format!("bad value for --{name}: {raw:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::Args;

    fn parse(args: &[&str]) -> Result<Args, String> {
        Args::parse_from(args.iter().map(|s| s.to_string()), &["size"], &["deflate"])
    }

    #[test]
    fn options_and_flags() {
        let args = parse(&["--size", "16", "--deflate"]).unwrap();
        assert_eq!(args.get_or("size", 0usize), Ok(16));
        assert!(args.flag("deflate"));
        assert_eq!(args.get_or("missing", 7u32), Ok(7));
        assert!(parse(&["--size"]).is_err());
        assert!(parse(&["--other", "1"]).is_err());
        assert!(parse(&["size"]).is_err());
    }
}
