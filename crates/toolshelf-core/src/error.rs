//! The core's one error type.
//!
//! Every variant names the offending input (file, item index and name, rule, mode), because a
//! catalog of 400 tools with one bad schema is useless to debug from "invalid schema". Errors that
//! the model can recover from (an unknown tool name, bad call arguments) are not errors here: they
//! are rendered as tool results by the caller, with the fix in the text.

/// Result alias for the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can make the core refuse its input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The catalog is not valid JSON.
    #[error("{source_name}: not valid JSON: {message}")]
    CatalogJson {
        /// File name or other label of the catalog.
        source_name: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The catalog's top level has no shape we know.
    #[error("{source_name}: {message}")]
    CatalogShape {
        /// File name or other label of the catalog.
        source_name: String,
        /// What was found and what was expected.
        message: String,
    },
    /// One item of the catalog is wrong.
    #[error("{source_name}: {location}: {message}")]
    CatalogItem {
        /// File name or other label of the catalog.
        source_name: String,
        /// Where: `tools[3] "name"` or `servers[1] "docs" tools[2] "read"`.
        location: String,
        /// What is wrong with it.
        message: String,
    },
    /// The configuration is not valid.
    #[error("{source_name}: {message}")]
    Config {
        /// File name or other label of the configuration.
        source_name: String,
        /// What is wrong, naming the key or rule.
        message: String,
    },
    /// `--mode` names a mode the configuration does not define.
    #[error("unknown mode {name:?}{}", modes_defined(available))]
    UnknownMode {
        /// The requested mode.
        name: String,
        /// Modes the configuration defines, sorted.
        available: Vec<String>,
    },
    /// A name resolves to no tool (or to a tool hidden by the active mode).
    #[error("no tool named {name:?}; {}", list_or_none("closest", suggestions))]
    UnknownTool {
        /// The requested name.
        name: String,
        /// Closest visible names.
        suggestions: Vec<String>,
    },
    /// A name no tool has because loading left its item out of the catalog.
    #[error("{name:?} was left out when the catalog loaded ({location}): {why}")]
    LeftOutTool {
        /// The item's name, as written.
        name: String,
        /// Where the item was: `cat.json: [3] "web_search"`.
        location: String,
        /// Why it was left out, as the load warning says.
        why: String,
    },
}

fn list_or_none(label: &str, items: &[String]) -> String {
    if items.is_empty() {
        format!("{label}: none")
    } else {
        format!("{label}: {}", items.join(", "))
    }
}

/// What an unknown mode's error says of the modes there are: `; defined modes: a, b`, or that
/// there are none and where modes come from (a list reading `none` would look like a mode named
/// `none`).
fn modes_defined(available: &[String]) -> String {
    if available.is_empty() {
        ": no modes are defined (modes come from [modes.NAME] in the configuration)".to_owned()
    } else {
        format!("; defined modes: {}", available.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_mode_says_which_modes_there_are_or_that_there_are_none() {
        let unknown = |available: &[&str]| {
            Error::UnknownMode {
                name: "g".into(),
                available: available.iter().map(|m| (*m).to_owned()).collect(),
            }
            .to_string()
        };
        assert_eq!(
            unknown(&[]),
            "unknown mode \"g\": no modes are defined (modes come from [modes.NAME] in the configuration)"
        );
        assert_eq!(
            unknown(&["ask", "files"]),
            "unknown mode \"g\"; defined modes: ask, files"
        );
    }
}
