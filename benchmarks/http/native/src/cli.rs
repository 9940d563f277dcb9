//! A tiny `--name value` option parser, enough for the benchmark helpers.

use std::collections::HashMap;
use std::str::FromStr;

pub struct Args {
    values: HashMap<String, String>,
}

impl Args {
    /// Parse the process arguments; every option takes a value and must be
    /// one of `known` (names without the leading `--`).
    pub fn parse(known: &[&str]) -> Result<Args, String> {
        Self::parse_from(std::env::args().skip(1), known)
    }

    pub fn parse_from<I>(args: I, known: &[&str]) -> Result<Args, String>
    where
        I: IntoIterator<Item = String>,
    {
        let mut values = HashMap::new();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let name = arg
                .strip_prefix("--")
                .filter(|name| known.contains(name))
                .ok_or_else(|| format!("unknown option {arg}"))?;
            let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
            values.insert(name.to_string(), value);
        }
        Ok(Args { values })
    }

    pub fn string(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The option parsed as `T`, or `default` when it was not given.
    pub fn get_or<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(raw) => raw
                .parse()
                .map_err(|_| format!("bad value for --{name}: {raw:?}")),
        }
    }

    /// The option parsed as `T`; an error when it was not given.
    pub fn required<T: FromStr>(&self, name: &str) -> Result<T, String> {
        let raw = self
            .values
            .get(name)
            .ok_or_else(|| format!("--{name} is required"))?;
        raw.parse()
            .map_err(|_| format!("bad value for --{name}: {raw:?}"))
    }
}
