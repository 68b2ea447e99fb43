//! What loading a configuration reports: each problem with its JSON path,
//! and the load error around them.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// One configuration problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// JSON path of the field, e.g. `$.pools[1].count`.
    pub path: String,
    /// What was expected there.
    pub expected: String,
    /// What was found.
    pub found: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: expected {}, found {}", self.path, self.expected, self.found)
    }
}

/// Every problem found in one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblems(pub Vec<Problem>);

impl ConfigProblems {
    /// The problem reported for `path`, if any.
    pub fn at(&self, path: &str) -> Option<&Problem> {
        self.0.iter().find(|p| p.path == path)
    }
}

impl fmt::Display for ConfigProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} configuration problem(s):", self.0.len())?;
        for p in &self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigProblems {}

/// Failure to load a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The text is not JSON.
    #[error("configuration is not valid JSON (line {line}, column {column}): {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// The JSON does not describe a valid configuration.
    #[error("{0}")]
    Invalid(#[from] ConfigProblems),
}

impl ConfigError {
    /// The problems, if this is [`ConfigError::Invalid`].
    pub fn problems(&self) -> Option<&ConfigProblems> {
        match self {
            ConfigError::Invalid(p) => Some(p),
            _ => None,
        }
    }
}
