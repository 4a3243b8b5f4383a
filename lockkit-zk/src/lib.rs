//! The ZooKeeper backend of lockkit. Empty until its issue lands: the recipe (ephemeral sequential nodes, predecessor watch, czxid fencing) will live here.
