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

    /// Checks the credentials a builder was given, if any: the user name must not be empty,
    /// nor hold any of `refused` (a character the store's user names cannot hold).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) of `backend` naming the user
    /// name and what to change.
    pub fn check(given: Option<&Self>, backend: &'static str, refused: &[char]) -> crate::Result<()> {
        let Some(user) = given.map(Self::user) else { return Ok(()) };
        let invalid = |message: String| Err(crate::Error::invalid_config(backend, message));
        if user.is_empty() {
            return invalid("the user name of the credentials is empty: give credentials as user and password".into());
        }
        match user.chars().find(|c| refused.contains(c)) {
            Some(c) => {
                invalid(format!("the user name {user:?} contains {c:?}, which a {backend} user name cannot hold"))
            }
            None => Ok(()),
        }
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
