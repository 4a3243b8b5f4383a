//! The `with_*` setters of the kit's configs, written once: [`with_setters!`] turns each line
//! `fn with_name(value: Type) => field = expression;` (with its doc comment) into a setter
//! that takes the config by value and returns it.

/// `with_*` setters inside an `impl` block: each line `fn with_name(value: Type, …) => field =
/// expression;`, with its doc comment, becomes `pub fn with_name(mut self, value: Type, …) ->
/// Self` that sets `self.field` to `expression` (which may use the values).
macro_rules! with_setters {
    () => {};
    ($(#[$doc:meta])* fn $setter:ident($($value:ident: $ty:ty),+) => $field:ident = $expression:expr; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $setter(mut self, $($value: $ty),+) -> Self {
            self.$field = $expression;
            self
        }
        $crate::setters::with_setters!($($rest)*);
    };
}

pub(crate) use with_setters;
