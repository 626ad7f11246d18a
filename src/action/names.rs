//! The string enums of the action space: action types, system buttons, terminate statuses.
//!
//! Each parses case-insensitively (ignoring `_`, `-` and spaces) and serializes as its canonical spelling.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident, $err:literal, { $($(#[$vm:meta])* $v:ident => $s:literal $(| $alt:literal)*),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// Every value, in declaration order (not every enum's list is used).
            #[allow(dead_code)]
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// The canonical spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }

        impl FromStr for $name {
            type Err = String;
            /// Case-insensitive; `-`, `_` and spaces are ignored.
            fn from_str(s: &str) -> Result<Self, String> {
                let key: String = s
                    .chars()
                    .filter(|c| !matches!(c, '_' | '-' | ' '))
                    .flat_map(char::to_lowercase)
                    .collect();
                $(
                    if key == $s.replace('_', "").to_lowercase() $(|| key == $alt)* {
                        return Ok($name::$v);
                    }
                )+
                Err(format!("{} {s:?}", $err))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> { s.serialize_str(self.as_str()) }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

string_enum!(
    /// The nine `mobile_use` action types (snake_case names as in the tool schema).
    ActionType, "unknown action", {
        /// `key(text)`: an adb key event.
        Key => "key",
        /// `click(coordinate)`.
        Click => "click" | "tap",
        /// `long_press(coordinate, time)`.
        LongPress => "long_press",
        /// `swipe(coordinate, coordinate2)`.
        Swipe => "swipe",
        /// `type(text)`.
        Type => "type",
        /// `system_button(button)`.
        SystemButton => "system_button",
        /// `open(text)`: open an app (`AWAKE` in MAI-UI's action space).
        Open => "open" | "awake",
        /// `wait(time)`.
        Wait => "wait",
        /// `terminate(status)`.
        Terminate => "terminate",
    }
);

string_enum!(
    /// A system button of `system_button`.
    Button, "unknown button", {
        /// Return to the previous screen.
        Back => "Back",
        /// Return to the desktop.
        Home => "Home",
        /// Open the app background menu.
        Menu => "Menu",
        /// Press enter.
        Enter => "Enter",
    }
);

string_enum!(
    /// The status of `terminate`.
    Status, "unknown status", {
        /// The task succeeded.
        Success => "success",
        /// The task failed (`fail` in MAI-UI's action space).
        Failure => "failure" | "fail",
    }
);

/// The canonical name of an action of the extended action spaces that has no `mobile_use` counterpart (spelling
/// compared as [`ActionType`]'s: case, `_`, `-` and spaces ignored); the documented synonyms of the nine
/// (`AWAKE` for `open`) are read as those.
pub(super) fn extension_action(name: &str) -> Option<&'static str> {
    let key: String = name
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    match key.as_str() {
        "answer" => Some("answer"),
        "askuser" | "info" => Some("ask_user"),
        "mcpcall" => Some("mcp_call"),
        "drag" => Some("drag"),
        _ => None,
    }
}
