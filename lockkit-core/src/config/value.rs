//! [`OptionValue`]: the types a setting can have, and how each is written in a URL.

use std::fmt;
use std::time::Duration;

use super::duration::{MAX_DURATION, parse_duration, show_duration};

/// A type a setting can have: how a value is written in a URL and read back.
///
/// lockkit-core implements it for [`Duration`] (`500ms`, `10s`), `bool` (`true`, `false`),
/// `u32` and [`String`]; a backend implements it for its own choices (an enum read from its
/// name, say).
pub trait OptionValue: Clone + fmt::Debug + Send + Sync + 'static {
    /// How a value is written, for messages and the options table: `duration`, `true or false`.
    const FORM: &'static str;

    /// The form of a default or a bound in a `const` [`Key`](super::Key): the type itself, or
    /// `&'static str` for text.
    type Const: Copy + Send + Sync + 'static;

    /// Reads a value from the text a URL carries.
    ///
    /// # Errors
    ///
    /// What is wrong with `text`, said so that the user knows what to write instead.
    fn parse(text: &str) -> std::result::Result<Self, String>;

    /// The value of a `const` default or bound.
    fn from_const(value: Self::Const) -> Self;

    /// The value as a URL writes it: the options table's defaults and ranges.
    fn show(&self) -> String;

    /// Whether the value lies between `min` and `max` (each included, when given); a type
    /// without an order has no range.
    fn within(&self, min: Option<&Self>, max: Option<&Self>) -> bool {
        let _ = (min, max);
        true
    }

    /// The most any setting of this type accepts, whatever its key's range says:
    /// [`MAX_DURATION`] for a duration, none for the others.
    fn cap() -> Option<Self> {
        None
    }
}

impl OptionValue for Duration {
    const FORM: &'static str = "duration";
    type Const = Duration;

    fn parse(text: &str) -> std::result::Result<Self, String> {
        parse_duration(text)
    }

    fn from_const(value: Duration) -> Self {
        value
    }

    fn show(&self) -> String {
        show_duration(*self)
    }

    fn within(&self, min: Option<&Self>, max: Option<&Self>) -> bool {
        min.is_none_or(|min| self >= min) && max.is_none_or(|max| self <= max)
    }

    fn cap() -> Option<Self> {
        Some(MAX_DURATION)
    }
}

impl OptionValue for bool {
    const FORM: &'static str = "true or false";
    type Const = bool;

    fn parse(text: &str) -> std::result::Result<Self, String> {
        match text {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(format!("{other:?} is not true or false")),
        }
    }

    fn from_const(value: bool) -> Self {
        value
    }

    fn show(&self) -> String {
        self.to_string()
    }
}

impl OptionValue for u32 {
    const FORM: &'static str = "whole number";
    type Const = u32;

    fn parse(text: &str) -> std::result::Result<Self, String> {
        text.trim().parse().map_err(|_| format!("{text:?} is not a whole number"))
    }

    fn from_const(value: u32) -> Self {
        value
    }

    fn show(&self) -> String {
        self.to_string()
    }

    fn within(&self, min: Option<&Self>, max: Option<&Self>) -> bool {
        min.is_none_or(|min| self >= min) && max.is_none_or(|max| self <= max)
    }
}

impl OptionValue for String {
    const FORM: &'static str = "text";
    type Const = &'static str;

    fn parse(text: &str) -> std::result::Result<Self, String> {
        Ok(text.to_owned())
    }

    fn from_const(value: &'static str) -> Self {
        value.to_owned()
    }

    fn show(&self) -> String {
        self.clone()
    }
}

/// Implements [`OptionValue`] for an enum whose every variant has a name in URLs: `parse`
/// reads the names, `show` writes them, and the form of a value lists them.
///
/// ```
/// #[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// enum Policy {
///     Suspend,
///     Lose,
/// }
/// lockkit_core::option_choices!(Policy { Suspend => "suspend", Lose => "lose" });
///
/// use lockkit_core::config::OptionValue;
/// assert_eq!(Policy::parse("lose"), Ok(Policy::Lose));
/// assert_eq!(Policy::FORM, "suspend, lose");
/// assert!(Policy::parse("keep").unwrap_err().contains("suspend, lose"));
/// ```
#[macro_export]
macro_rules! option_choices {
    ($type:ty { $first:ident => $first_name:literal $(, $variant:ident => $name:literal)* $(,)? }) => {
        impl $crate::config::OptionValue for $type {
            const FORM: &'static str = concat!($first_name $(, ", ", $name)*);
            type Const = Self;

            fn parse(text: &str) -> ::std::result::Result<Self, ::std::string::String> {
                match text {
                    $first_name => Ok(Self::$first),
                    $($name => Ok(Self::$variant),)*
                    other => Err(format!("{other:?} is not one of {}", Self::FORM)),
                }
            }

            fn from_const(value: Self) -> Self {
                value
            }

            fn show(&self) -> ::std::string::String {
                match self {
                    Self::$first => $first_name,
                    $(Self::$variant => $name,)*
                }
                .to_owned()
            }
        }
    };
}
