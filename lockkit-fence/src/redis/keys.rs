//! The fence key of a resource key: in the same hash slot, so that the check and the write
//! are one script on Redis Cluster too.

use crate::FenceError;

/// The hash tag of `key` by Redis Cluster's rule: the bytes between the first `{` and the
/// first `}` after it, when there is at least one; `None` when the whole key is hashed.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The fence key of resource key `key`, under `prefix` (which has no braces):
///
/// - `key` has a hash tag `t`: `{prefix}{t}:{key}`, hashed by `t` as `key` is;
/// - `key` has none and no `}`: `{prefix}{key}`, hashed by the whole `key` as `key` is.
///
/// Both forms are injective (a tag never contains `}`, and only the first form has two), so
/// two resources never share a fence key.
///
/// # Errors
///
/// [`FenceError::InvalidInput`] for a key without a hash tag that contains `}`: no tag can
/// put another key in its slot.
pub(crate) fn fence_key(prefix: &str, key: &str) -> Result<String, FenceError> {
    if let Some(tag) = hash_tag(key) {
        return Ok(format!("{prefix}{{{tag}}}:{key}"));
    }
    if key.contains('}') {
        return Err(FenceError::invalid(format!(
            "the Redis key {key:?} has no hash tag and contains '}}', so no fence key can share its hash slot; give it a hash tag (such as {{orders}}:42) or leave the '}}' out"
        )));
    }
    Ok(format!("{prefix}{{{key}}}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tags_follow_redis_cluster() {
        assert_eq!(hash_tag("{user1000}.following"), Some("user1000"));
        assert_eq!(hash_tag("foo{}{bar}"), None, "an empty first tag hashes the whole key");
        assert_eq!(hash_tag("foo{{bar}}zap"), Some("{bar"));
        assert_eq!(hash_tag("foo{bar}{zap}"), Some("bar"));
        assert_eq!(hash_tag("plain"), None);
        assert_eq!(hash_tag("open{only"), None);
    }

    #[test]
    fn fence_keys_share_the_tag_and_never_collide() {
        let p = "lockkit-fence:";
        assert_eq!(fence_key(p, "orders/42").unwrap(), "lockkit-fence:{orders/42}");
        assert_eq!(fence_key(p, "{orders}:42").unwrap(), "lockkit-fence:{orders}:{orders}:42");
        for key in ["orders/42", "{orders}:42", "a{b", "{x}", "x{y}z"] {
            let fenced = fence_key(p, key).unwrap();
            let expected = hash_tag(key).unwrap_or(key);
            assert_eq!(hash_tag(&fenced), Some(expected), "{key}: same slot");
        }
        assert_ne!(fence_key(p, "{x}").unwrap(), fence_key(p, "x}:{x").unwrap_or_default());
        assert!(fence_key(p, "a}b").unwrap_err().to_string().contains("hash tag"));
    }
}
