//! A user name and password for a store's authentication, whose `Debug` never shows the
//! password: builders and settings that keep one can derive `Debug` safely.

use std::fmt;

/// A user name and a password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    user: String,
    password: String,
}

impl Credentials {
    /// The credentials of `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self { user: user.into(), password: password.into() }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password, for the store's client only: never for a message or a log.
    pub fn password(&self) -> &str {
        &self.password
    }
}

/// Shows the user and hides the password.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("password", &"…").finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Credentials;

    #[test]
    fn debug_shows_the_user_and_hides_the_password() {
        let shown = format!("{:?}", Some(Credentials::new("alice", "s3cret")));
        assert!(shown.contains("alice") && !shown.contains("s3cret"), "{shown}");
    }
}
