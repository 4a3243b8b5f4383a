//! The schema and the statements, for one schema name (checked to be a plain identifier).

use tokio_postgres::types::Type;

/// The length of a provider's tag: `<schema>_g_<tag>` fits PostgreSQL's 63-byte identifiers
/// with the longest schema name accepted (50).
pub(crate) const TAG_LEN: usize = 10;

/// The key of the advisory locks of this crate (the first half of the two-key form), so that
/// they do not collide with an application's own advisory locks on one key.
const ADVISORY_CLASS: i32 = 0x6c6b_6b74; // "lkkt"

/// The statements of one schema.
#[derive(Clone, Debug)]
pub(crate) struct Statements {
    pub(crate) schema: String,
    /// `LISTEN` target and `pg_notify` channel of freed names: `<schema>_released`.
    pub(crate) channel: String,
    /// `LISTEN` target and `pg_notify` channel of hand-overs to owner ids without a provider's
    /// tag (providers of an earlier version), the payload `<token>:<owner id>`:
    /// `<schema>_granted`. Hand-overs to a tagged owner id go to its provider's own channel
    /// (`listener.rs`).
    pub(crate) granted: String,
    pub(crate) acquire: String,
    pub(crate) release: String,
    pub(crate) abandon: String,
    /// `break_lock(name)`: every holder row it deleted.
    pub(crate) break_lock: String,
    pub(crate) downgrade: String,
    pub(crate) renew: String,
    pub(crate) inspect: String,
    pub(crate) present: String,
    pub(crate) privileges: String,
    /// The elections' objects and statements.
    pub(crate) election: crate::election_sql::ElectionStatements,
}

/// The functions of the schema, as `to_regprocedure` and `GRANT` spell them.
fn functions(s: &str) -> [String; 8] {
    [
        format!("{s}.acquire(text,text,text,bigint,bigint,text,integer)"),
        format!("{s}.release(text,text)"),
        format!("{s}.abandon(text,text)"),
        format!("{s}.downgrade(text,text)"),
        format!("{s}.hand_over(text)"),
        format!("{s}.break_lock(text)"),
        format!("{s}.fence_ms()"),
        format!("{s}.next_token()"),
    ]
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let s = schema;
        let election = crate::election_sql::ElectionStatements::new(s);
        let functions = functions(s);
        Self {
            schema: s.to_owned(),
            channel: format!("{s}_released"),
            granted: format!("{s}_granted"),
            // The fourth column: the server time (µs) once the function has run, computed as the
            // hand-over's notification computes its own.
            acquire: format!(
                "SELECT o_token, o_left_ms, o_conflict, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
                 FROM {s}.acquire($1, $2, $3, $4, $5, $6, $7)"
            ),
            release: format!("SELECT {s}.release($1, $2)"),
            abandon: format!("SELECT {s}.abandon($1, $2)"),
            break_lock: format!(
                "SELECT o_meta, o_token, o_since_ms, o_left_ms, o_kind, o_permits FROM {s}.break_lock($1)"
            ),
            downgrade: format!("SELECT {s}.downgrade($1, $2)"),
            // Each hold's answer by its place in the arrays (1-based), not by its name and owner:
            // a reply of a few bytes per hold, which the client reads without a string.
            renew: format!(
                "WITH want AS (SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w(name, owner, pos)), \
                 renewed AS (UPDATE {s}.locks l SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                   FROM want w WHERE l.name = w.name AND l.owner = w.owner RETURNING l.name, l.owner), \
                 renewed_leaders AS (UPDATE {s}.candidates c \
                   SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                   FROM want w WHERE c.name = w.name AND c.owner = w.owner AND c.token IS NOT NULL \
                     AND c.expires_at > clock_timestamp() RETURNING c.name, c.owner) \
                 SELECT w.pos::integer, r.name IS NOT NULL OR rl.name IS NOT NULL, \
                   CASE WHEN r.name IS NOT NULL OR rl.name IS NOT NULL THEN true \
                   ELSE EXISTS (SELECT 1 FROM {s}.locks l WHERE l.name = w.name) \
                   OR EXISTS (SELECT 1 FROM {s}.candidates c WHERE c.name = w.name AND c.token IS NOT NULL) END \
                 FROM want w LEFT JOIN renewed r ON r.name = w.name AND r.owner = w.owner \
                   LEFT JOIN renewed_leaders rl ON rl.name = w.name AND rl.owner = w.owner"
            ),
            inspect: format!(
                "SELECT l.meta, l.token, (extract(epoch FROM l.since) * 1000)::bigint, \
                 greatest(0, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000))::bigint, \
                 (SELECT count(*) FROM {s}.waiters w WHERE w.name = $1 AND w.expires_at > clock_timestamp()), \
                 l.kind, l.permits \
                 FROM (SELECT 1) AS one LEFT JOIN {s}.locks l ON l.name = $1 AND l.expires_at > clock_timestamp() \
                 ORDER BY l.token"
            ),
            present: format!(
                "SELECT to_regclass('{s}.locks') IS NOT NULL AND to_regclass('{s}.tokens') IS NOT NULL \
                 AND to_regclass('{s}.voided') IS NOT NULL \
                 AND to_regclass('{s}.waiters') IS NOT NULL AND to_regclass('{s}.positions') IS NOT NULL \
                 AND to_regclass('{s}.alive') IS NOT NULL AND to_regclass('{s}.settings') IS NOT NULL \
                 AND {}{}",
                functions
                    .iter()
                    .map(|f| format!("to_regprocedure('{f}') IS NOT NULL"))
                    .collect::<Vec<_>>()
                    .join(" AND "),
                election.present()
            ),
            privileges: format!(
                "SELECT has_schema_privilege('{s}', 'USAGE'), \
                 has_table_privilege('{s}.locks', 'SELECT, INSERT, UPDATE, DELETE'), \
                 has_sequence_privilege('{s}.tokens', 'USAGE, UPDATE'), \
                 has_table_privilege('{s}.voided', 'SELECT, INSERT, DELETE'), \
                 has_table_privilege('{s}.waiters', 'SELECT, INSERT, UPDATE, DELETE'), \
                 has_sequence_privilege('{s}.positions', 'USAGE'), \
                 has_table_privilege('{s}.alive', 'SELECT, INSERT'), \
                 has_table_privilege('{s}.settings', 'SELECT, UPDATE'), {}{}",
                functions
                    .iter()
                    .map(|f| format!("has_function_privilege('{f}', 'EXECUTE')"))
                    .collect::<Vec<_>>()
                    .join(", "),
                election.privileges()
            ),
            election,
        }
    }

    /// The statements of the hot path (a grant's try, a release) with their parameters'
    /// types: prepared once per command connection (`store.rs`). Not the renewal round: it
    /// runs once per renewal interval, and its plan depends on how many holds it renews (a
    /// generic plan would be made for an assumed count, not the real one).
    pub(crate) fn prepared(&self) -> [(&str, &'static [Type]); 2] {
        [
            (&self.acquire, &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8, Type::INT8, Type::TEXT, Type::INT4]),
            (&self.release, &[Type::TEXT, Type::TEXT]),
        ]
    }

    /// What a role that only takes locks needs, as `GRANT` statements for `role`.
    pub(crate) fn grants(&self, role: &str) -> String {
        let s = &self.schema;
        format!(
            "GRANT USAGE ON SCHEMA {s} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.locks TO {role}; \
             GRANT SELECT, INSERT, DELETE ON {s}.voided TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.waiters TO {role}; \
             GRANT USAGE ON SEQUENCE {s}.tokens, {s}.positions TO {role}; \
             GRANT UPDATE ON SEQUENCE {s}.tokens TO {role}; \
             GRANT SELECT, INSERT ON {s}.alive TO {role}; \
             GRANT SELECT, UPDATE ON {s}.settings TO {role}; \
             GRANT EXECUTE ON FUNCTION {} TO {role};{}",
            functions(s).join(", "),
            self.election.grants(role)
        )
    }

    /// The whole schema in one transaction, serialized by an advisory lock so that providers
    /// racing to create it do not fail; every statement is idempotent, and a schema of the
    /// first landing (one row per name, no kinds) is brought forward in place.
    pub(crate) fn migration(&self) -> String {
        let s = &self.schema;
        let channel = &self.channel;
        let elections = self.election.migration();
        let kind_conflict = crate::election_sql::KIND_CONFLICT;
        let granted = &self.granted;
        let tag_len = TAG_LEN;
        format!(
            r#"BEGIN;
-- The schema is durable whatever the connection's default: a schema lost in a crash would
-- be created again with a fresh `alive` row, which would open the restart fence.
SET LOCAL synchronous_commit = on;
-- Another provider's migration holds the lock below until it commits: wait for it, bounded by
-- the statement timeout, whatever `lock_timeout` the role sets for its own statements.
SET LOCAL lock_timeout = 0;
SELECT pg_advisory_xact_lock({ADVISORY_CLASS}, 0);
CREATE SCHEMA IF NOT EXISTS {s};
CREATE SEQUENCE IF NOT EXISTS {s}.tokens AS bigint MINVALUE 1;
CREATE TABLE IF NOT EXISTS {s}.locks (
  name text NOT NULL,
  owner text NOT NULL,
  meta text NOT NULL,
  token bigint NOT NULL,
  since timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  kind text NOT NULL DEFAULT 'mutex',
  permits integer NOT NULL DEFAULT 0,
  PRIMARY KEY (name, owner)
);
CREATE SEQUENCE IF NOT EXISTS {s}.positions AS bigint MINVALUE 1;
CREATE TABLE IF NOT EXISTS {s}.waiters (
  name text NOT NULL,
  owner text NOT NULL,
  pos bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  kind text NOT NULL DEFAULT 'mutex',
  permits integer NOT NULL DEFAULT 0,
  meta text NOT NULL DEFAULT '',
  lease_ms bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (name, owner)
);
CREATE TABLE IF NOT EXISTS {s}.voided (
  owner text PRIMARY KEY,
  until timestamptz NOT NULL
);
-- Bring the first landing's tables forward: every row there is a mutex hold, and a name may
-- now have several rows (readers, permits), keyed by (name, owner).
ALTER TABLE {s}.locks ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'mutex';
ALTER TABLE {s}.locks ADD COLUMN IF NOT EXISTS permits integer NOT NULL DEFAULT 0;
-- Room in each page for a renewed row's new version: a renewal is then a HOT update that
-- touches no index (the UPDATE of a round of 100,000 holds: 1.3 s, 0.5 s with it).
ALTER TABLE {s}.locks SET (fillfactor = 50);
ALTER TABLE {s}.waiters ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'mutex';
ALTER TABLE {s}.waiters ADD COLUMN IF NOT EXISTS permits integer NOT NULL DEFAULT 0;
ALTER TABLE {s}.waiters ADD COLUMN IF NOT EXISTS meta text NOT NULL DEFAULT '';
ALTER TABLE {s}.waiters ADD COLUMN IF NOT EXISTS lease_ms bigint NOT NULL DEFAULT 0;
DO $lockkit$
DECLARE
  v_key text;
BEGIN
  SELECT c.conname INTO v_key FROM pg_constraint c
    WHERE c.conrelid = '{s}.locks'::regclass AND c.contype = 'p' AND array_length(c.conkey, 1) = 1;
  IF v_key IS NOT NULL THEN
    EXECUTE format('ALTER TABLE {s}.locks DROP CONSTRAINT %I, ADD PRIMARY KEY (name, owner)', v_key);
  END IF;
END
$lockkit$;
DROP FUNCTION IF EXISTS {s}.acquire(text,text,text,bigint,bigint);
-- The restart fence (see the guide's PostgreSQL page): `settings` (durable) has the longest lease of any
-- provider of the schema and whether any commits its grants without waiting for the disk;
-- `alive` (unlogged: PostgreSQL empties it in every crash recovery, and it is empty on a
-- promoted standby; a clean shutdown keeps it) has the server time from which grants are
-- known to be durable or fenced. Created with the schema, `alive` says "since ever": nothing
-- can have been lost before the schema existed. Created later (or emptied by a crash), the
-- first grant writes the time it looked, and no grant is made for the longest lease after.
CREATE TABLE IF NOT EXISTS {s}.settings (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  longest_lease_ms bigint NOT NULL DEFAULT 0,
  async_grants boolean NOT NULL DEFAULT false
);
INSERT INTO {s}.settings (one) VALUES (true) ON CONFLICT DO NOTHING;
DO $lockkit$
BEGIN
  IF to_regclass('{s}.alive') IS NULL THEN
    CREATE UNLOGGED TABLE {s}.alive (
      one boolean PRIMARY KEY DEFAULT true CHECK (one),
      since timestamptz NOT NULL
    );
    INSERT INTO {s}.alive (one, since) VALUES (true, 'epoch');
  END IF;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.fence_ms() RETURNS bigint LANGUAGE plpgsql AS $lockkit$
-- How long no grant may be made (0: none): until `alive.since` plus the longest lease, when
-- some provider commits its grants without waiting for the disk. Every holder whose grant or
-- renewal a crash lost sent it before the crash, so its own deadline has passed by then.
DECLARE
  v_since timestamptz;
  v_lease bigint;
  v_async boolean;
BEGIN
  SELECT st.longest_lease_ms, st.async_grants INTO v_lease, v_async FROM {s}.settings st;
  IF NOT coalesce(v_async, false) THEN
    RETURN 0;
  END IF;
  SELECT a.since INTO v_since FROM {s}.alive a;
  IF NOT FOUND THEN
    INSERT INTO {s}.alive (one, since) VALUES (true, clock_timestamp()) ON CONFLICT DO NOTHING;
    SELECT a.since INTO v_since FROM {s}.alive a;
  END IF;
  RETURN greatest(0, ceil(extract(epoch FROM v_since + v_lease * interval '1 millisecond' - clock_timestamp()) * 1000))::bigint;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.next_token() RETURNS bigint LANGUAGE plpgsql AS $lockkit$
-- A fencing token: the sequence's next value or the server clock in microseconds, whichever
-- is greater, the sequence moved up to it. A grant committed without waiting for the disk may
-- lose its sequence advance in a crash; a token from the clock still exceeds it, as long as
-- the server clock does not step back.
DECLARE
  v_next bigint;
  v_clock bigint;
BEGIN
  v_next := nextval('{s}.tokens');
  v_clock := floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  IF v_clock > v_next THEN
    PERFORM setval('{s}.tokens', v_clock);
    RETURN v_clock;
  END IF;
  RETURN v_next;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.hand_over(p_name text) RETURNS integer LANGUAGE plpgsql AS $lockkit$
-- Grants the name to the head of its queue, and on along the queue while the holders admit
-- the next (a run of readers, free permits); each grant a new row with its own token, the
-- waiter's place removed, and a notification to its owner (delivered only once this commits:
-- proof of the grant). An owner id `<tag>.<attempt>` is told on its provider's own channel
-- `<schema>_g_<tag>`, as `<token>:<µs>:<owner>` where `<µs>` is the server time of the grant,
-- from which the row's lease counts; any other owner id (a provider of an earlier version) on
-- the schema's `<schema>_granted` as `<token>:<owner>`. The caller holds the name's advisory
-- lock. Nothing is granted while the restart fence lasts.
DECLARE
  w record;
  v_excl boolean;
  v_count integer;
  v_granted integer := 0;
  v_token bigint;
  v_now timestamptz;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {s}.waiters q WHERE q.name = p_name) OR {s}.fence_ms() > 0 THEN
    RETURN 0;
  END IF;
  DELETE FROM {s}.locks l WHERE l.name = p_name AND l.expires_at <= clock_timestamp();
  DELETE FROM {s}.waiters q WHERE q.name = p_name AND q.expires_at <= clock_timestamp();
  SELECT coalesce(bool_or(l.kind IN ('mutex', 'write')), false), count(*) INTO v_excl, v_count
    FROM {s}.locks l WHERE l.name = p_name;
  FOR w IN SELECT * FROM {s}.waiters q WHERE q.name = p_name ORDER BY q.pos LOOP
    EXIT WHEN v_excl;
    IF w.kind IN ('mutex', 'write') THEN
      EXIT WHEN v_count > 0;
    ELSIF w.kind = 'permit' THEN
      EXIT WHEN v_count >= w.permits;
    END IF;
    DELETE FROM {s}.waiters q WHERE q.name = p_name AND q.owner = w.owner;
    v_now := clock_timestamp();
    INSERT INTO {s}.locks AS l (name, owner, meta, token, since, expires_at, kind, permits)
      VALUES (p_name, w.owner, w.meta, {s}.next_token(), v_now,
              v_now + w.lease_ms * interval '1 millisecond', w.kind, w.permits)
      RETURNING l.token INTO v_token;
    IF w.owner ~ '^[0-9a-f]{{{tag_len}}}[.]' THEN
      PERFORM pg_notify('{s}_g_' || left(w.owner, {tag_len}),
        v_token || ':' || floor(extract(epoch FROM v_now) * 1000000)::bigint || ':' || w.owner);
    ELSE
      PERFORM pg_notify('{granted}', v_token || ':' || w.owner);
    END IF;
    v_granted := v_granted + 1;
    v_count := v_count + 1;
    v_excl := w.kind IN ('mutex', 'write');
  END LOOP;
  RETURN v_granted;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.acquire(p_name text, p_owner text, p_meta text, p_lease_ms bigint,
  p_queue_ms bigint, p_kind text, p_permits integer, OUT o_token bigint, OUT o_left_ms bigint,
  OUT o_conflict text) LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_token bigint;
  v_expires timestamptz;
  v_other_kind text;
  v_other_permits integer;
  v_excl boolean;
  v_count integer;
  v_left double precision;
  v_pos bigint;
  v_ahead_excl boolean;
  v_ahead integer;
  v_ahead_left double precision;
  v_ok boolean;
  v_fence bigint := 0;
BEGIN
  -- Ours already: handed over by a release, or granted to a try whose reply was lost. No
  -- write and no advisory lock (the one owner's row is only removed by its own release or
  -- abandon, which come after this try's reply, or never reach it): the caller counts its
  -- deadline from its send time and what is left here. A confirmation does not queue behind
  -- the grants and refusals of the name.
  SELECT l.token, l.expires_at INTO v_token, v_expires FROM {s}.locks l
    WHERE l.name = p_name AND l.owner = p_owner;
  IF v_expires > clock_timestamp() THEN
    o_token := v_token;
    o_left_ms := greatest(0, floor(extract(epoch FROM v_expires - clock_timestamp()) * 1000))::bigint;
    RETURN;
  END IF;
  -- Every change of a name's holders and queue is serialized here: a reader's try takes the
  -- name's advisory lock shared, everything else (mutex, write and permit tries, releases
  -- that hand over, abandons, downgrades, breaks, campaigns) exclusive. So a reader is never
  -- granted beside such a change, and sees all of it (each statement here reads afresh once
  -- the lock is held); readers beside each other touch their own rows only, and their grants
  -- commit (a WAL flush each) together instead of one after another. A token is drawn while
  -- this is held: tokens of one name increase in commit order but between readers, which
  -- may come back in either order (contract 21 compares a reader with writes only).
  IF p_kind = 'read' THEN
    PERFORM pg_advisory_xact_lock_shared({ADVISORY_CLASS}, hashtext(p_name));
  ELSE
    PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  END IF;
  -- The lean path: nothing on the name (no holder row, live or expired, and so not ours;
  -- for a reader, no row but readers'; no place in the queue; no candidate of an election),
  -- the owner not voided, and no restart fence: granted, with nobody to be fair to and
  -- nothing to conflict with. One statement instead of the nine below.
  IF NOT EXISTS (SELECT 1 FROM {s}.locks l WHERE l.name = p_name AND (p_kind <> 'read' OR l.kind <> 'read'))
     AND NOT EXISTS (SELECT 1 FROM {s}.waiters w WHERE w.name = p_name)
     AND NOT EXISTS (SELECT 1 FROM {s}.candidates c WHERE c.name = p_name)
     AND NOT EXISTS (SELECT 1 FROM {s}.voided v WHERE v.owner = p_owner)
     AND {s}.fence_ms() = 0 THEN
    INSERT INTO {s}.locks AS l (name, owner, meta, token, since, expires_at, kind, permits)
      VALUES (p_name, p_owner, p_meta, {s}.next_token(), clock_timestamp(),
              clock_timestamp() + p_lease_ms * interval '1 millisecond', p_kind, p_permits)
      ON CONFLICT (name, owner) DO NOTHING
      RETURNING l.token INTO o_token;
    IF FOUND THEN
      o_left_ms := p_lease_ms;
      RETURN;
    END IF;
    -- Not inserted: a reader's earlier try of this owner (its reply lost, the try still
    -- running beside this one) committed the row meanwhile; the path below answers.
  END IF;
  IF EXISTS (SELECT 1 FROM {s}.candidates c WHERE c.name = p_name AND c.expires_at > clock_timestamp()) THEN
    RAISE EXCEPTION USING ERRCODE = '{kind_conflict}',
      MESSAGE = 'the name is in use as an election; a lock needs a name of its own';
  END IF;
  IF EXISTS (SELECT 1 FROM {s}.voided v WHERE v.owner = p_owner) THEN
    -- A late try of an abandoned acquisition (its reply was lost, then it gave up).
    o_left_ms := 0;
    RETURN;
  END IF;
  -- Again under the lock: a hand-over to this owner may have committed since the look above.
  SELECT l.token, l.expires_at INTO v_token, v_expires FROM {s}.locks l
    WHERE l.name = p_name AND l.owner = p_owner;
  IF v_expires > clock_timestamp() THEN
    o_token := v_token;
    o_left_ms := greatest(0, floor(extract(epoch FROM v_expires - clock_timestamp()) * 1000))::bigint;
    RETURN;
  ELSIF v_token IS NOT NULL THEN
    -- Ours but expired: gone; this try starts afresh.
    DELETE FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
  END IF;
  -- One name, one kind: a semaphore (of one permit count) or a lock (mutex, read, write).
  SELECT x.kind, x.permits INTO v_other_kind, v_other_permits FROM (
      SELECT l.kind, l.permits FROM {s}.locks l WHERE l.name = p_name AND l.expires_at > clock_timestamp()
      UNION ALL
      SELECT w.kind, w.permits FROM {s}.waiters w
        WHERE w.name = p_name AND w.owner <> p_owner AND w.expires_at > clock_timestamp()
    ) x
    WHERE (x.kind = 'permit') <> (p_kind = 'permit') OR (p_kind = 'permit' AND x.permits <> p_permits)
    LIMIT 1;
  IF FOUND THEN
    o_conflict := CASE WHEN v_other_kind <> 'permit' THEN 'lock' ELSE v_other_permits::text END;
    RETURN;
  END IF;
  SELECT coalesce(bool_or(l.kind IN ('mutex', 'write')), false), count(*),
      min(extract(epoch FROM l.expires_at - clock_timestamp()))
    INTO v_excl, v_count, v_left
    FROM {s}.locks l WHERE l.name = p_name AND l.expires_at > clock_timestamp();
  -- Fair order: the live waiters that queued before this one (all of them when it has no place).
  SELECT w.pos INTO v_pos FROM {s}.waiters w WHERE w.name = p_name AND w.owner = p_owner;
  SELECT coalesce(bool_or(w.kind IN ('mutex', 'write')), false), count(*),
      min(extract(epoch FROM w.expires_at - clock_timestamp()))
    INTO v_ahead_excl, v_ahead, v_ahead_left
    FROM {s}.waiters w
    WHERE w.name = p_name AND w.owner <> p_owner AND w.expires_at > clock_timestamp()
      AND (v_pos IS NULL OR w.pos < v_pos);
  v_ok := CASE
    WHEN p_kind = 'read' THEN NOT v_excl AND NOT v_ahead_excl
    WHEN p_kind = 'permit' THEN v_count + v_ahead < p_permits
    ELSE v_count = 0 AND v_ahead = 0
  END;
  IF v_ok THEN
    -- After a crash, no grant until every holder whose grant or renewal it lost is past its
    -- deadline: refused like a busy name, told to look again when the fence ends.
    v_fence := {s}.fence_ms();
  END IF;
  IF NOT v_ok OR v_fence > 0 THEN
    -- A refusal grants nothing: its commit (a place in the queue, renewed) need not wait for
    -- the disk, and the name's advisory lock is not held through a flush. A place lost in a
    -- crash is taken again by the waiter's next try.
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_queue_ms > 0 THEN
      INSERT INTO {s}.waiters AS w (name, owner, pos, expires_at, kind, permits, meta, lease_ms)
        VALUES (p_name, p_owner, nextval('{s}.positions'), clock_timestamp() + p_queue_ms * interval '1 millisecond',
                p_kind, p_permits, p_meta, p_lease_ms)
        ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    END IF;
    -- Look again when a holder's lease or a place ahead would lapse, whichever comes first.
    o_left_ms := greatest(1, v_fence, ceil(coalesce(least(v_left, v_ahead_left), 0.001) * 1000))::bigint;
    RETURN;
  END IF;
  IF p_kind = 'read' THEN
    -- Beside other readers: only this owner's own rows (no two readers delete one row, so
    -- none waits on another's); rows expired are left to the next exclusive change.
    DELETE FROM {s}.waiters w WHERE w.name = p_name AND w.owner = p_owner;
  ELSE
    DELETE FROM {s}.locks l WHERE l.name = p_name AND l.expires_at <= clock_timestamp();
    DELETE FROM {s}.waiters w WHERE w.name = p_name AND (w.owner = p_owner OR w.expires_at <= clock_timestamp());
  END IF;
  INSERT INTO {s}.locks AS l (name, owner, meta, token, since, expires_at, kind, permits)
    VALUES (p_name, p_owner, p_meta, {s}.next_token(), clock_timestamp(),
            clock_timestamp() + p_lease_ms * interval '1 millisecond', p_kind, p_permits)
    ON CONFLICT (name, owner) DO NOTHING
    RETURNING l.token INTO o_token;
  IF FOUND THEN
    o_left_ms := p_lease_ms;
    RETURN;
  END IF;
  -- Not inserted: as above, an earlier try of this reader committed the row meanwhile; answered
  -- as that try was, or tried again at once when the row expired since.
  SELECT l.token, l.expires_at INTO v_token, v_expires FROM {s}.locks l
    WHERE l.name = p_name AND l.owner = p_owner;
  IF v_expires > clock_timestamp() THEN
    o_token := v_token;
    o_left_ms := greatest(0, floor(extract(epoch FROM v_expires - clock_timestamp()) * 1000))::bigint;
  ELSE
    o_left_ms := 1;
  END IF;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.release(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_kind text;
BEGIN
  -- A reader's release with nobody queued grants nothing: it takes the name's advisory lock
  -- shared, as readers' grants do, so that readers coming and going do not queue one behind
  -- the other. A waiter that queued meanwhile (under the exclusive lock, before this one got
  -- the shared lock) is told to look again: no hand-over is made under a shared lock.
  SELECT l.kind INTO v_kind FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
  IF v_kind = 'read' AND NOT EXISTS (SELECT 1 FROM {s}.waiters q WHERE q.name = p_name) THEN
    PERFORM pg_advisory_xact_lock_shared({ADVISORY_CLASS}, hashtext(p_name));
    DELETE FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
    IF NOT FOUND THEN
      RETURN false;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    IF EXISTS (SELECT 1 FROM {s}.waiters q WHERE q.name = p_name) THEN
      PERFORM pg_notify('{channel}', p_name);
    END IF;
    RETURN true;
  END IF;
  -- Serialized with the grants of the name: the release may grant (hand over) it.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  DELETE FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM {s}.waiters q WHERE q.name = p_name) THEN
    -- Nobody waits: nothing to hand over and nobody to wake (every waiter has a place, taken
    -- by its first refused try before it waits; one whose place a crash lost looks again
    -- within the safety poll). No NOTIFY, whose commit is serialized across the server.
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN true;
  END IF;
  IF {s}.hand_over(p_name) = 0 THEN
    -- Nothing granted: the commit need not wait for the disk (a release lost in a crash
    -- leaves a row that expires after its lease). A hand-over is a grant: it waits.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_notify('{channel}', p_name);
  END IF;
  RETURN true;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.abandon(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_freed boolean;
  v_left boolean;
BEGIN
  -- Serialized with the grants of the name: a try of this owner still on its way is refused
  -- once this commits, and one that committed before (or a hand-over to it) is undone here.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  DELETE FROM {s}.voided v WHERE v.until < clock_timestamp();
  INSERT INTO {s}.voided AS v (owner, until) VALUES (p_owner, clock_timestamp() + interval '1 hour')
    ON CONFLICT (owner) DO NOTHING;
  DELETE FROM {s}.waiters w WHERE w.name = p_name AND w.owner = p_owner;
  v_left := FOUND;
  DELETE FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
  v_freed := FOUND;
  -- A place left may let the ones behind it go (readers behind a writer that gave up).
  IF (v_freed OR v_left) AND {s}.hand_over(p_name) > 0 THEN
    RETURN v_freed;
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  IF v_freed THEN
    PERFORM pg_notify('{channel}', p_name);
  END IF;
  RETURN v_freed;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.downgrade(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
BEGIN
  -- The write row becomes a read row in place, keeping its token; the readers at the head
  -- of the queue may then be granted with it (a writer queued keeps its turn).
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  UPDATE {s}.locks l SET kind = 'read' WHERE l.name = p_name AND l.owner = p_owner AND l.kind = 'write';
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM {s}.hand_over(p_name);
  RETURN true;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.break_lock(p_name text) RETURNS TABLE (o_owner text, o_meta text,
  o_token bigint, o_since_ms bigint, o_left_ms bigint, o_kind text, o_permits integer) LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_leader record;
BEGIN
  -- Serialized with the grants of the name, like a release. Every holder row of the name
  -- goes (one per owner where a lock has several holders); the holds still live are returned.
  -- The queue is handed the lock as by a release; a broken holder learns it at its next
  -- renewal, which finds its row gone.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  RETURN QUERY
    WITH gone AS (DELETE FROM {s}.locks l WHERE l.name = p_name RETURNING l.*)
    SELECT g.owner, g.meta, g.token, (extract(epoch FROM g.since) * 1000)::bigint,
      greatest(0, ceil(extract(epoch FROM g.expires_at - clock_timestamp()) * 1000))::bigint, g.kind, g.permits
    FROM gone g WHERE g.expires_at > clock_timestamp() ORDER BY g.token;
  IF {s}.hand_over(p_name) = 0 THEN
    PERFORM pg_notify('{channel}', p_name);
  END IF;
  -- The leader of an election of the name: its term ends as by a resignation (the journal
  -- records the vacancy, and its notification wakes the next candidate and the observers).
  -- A break is durable whatever the connection's default: one lost in a crash would give the
  -- broken holder its row back after its breaker was told it was gone.
  PERFORM set_config('synchronous_commit', 'on', true);
  DELETE FROM {s}.candidates c WHERE c.name = p_name AND c.token IS NOT NULL
    RETURNING c.owner, c.meta, c.token, c.since, c.expires_at INTO v_leader;
  IF v_leader.token IS NOT NULL THEN
    PERFORM {s}.election_journal(p_name, NULL, NULL, clock_timestamp());
    IF v_leader.expires_at > clock_timestamp() THEN
      o_owner := v_leader.owner;
      o_meta := v_leader.meta;
      o_token := v_leader.token;
      o_since_ms := (extract(epoch FROM v_leader.since) * 1000)::bigint;
      o_left_ms := greatest(0, ceil(extract(epoch FROM v_leader.expires_at - clock_timestamp()) * 1000))::bigint;
      o_kind := 'candidate';
      o_permits := NULL;
      RETURN NEXT;
    END IF;
  END IF;
END
$lockkit$;
{elections}
COMMIT;"#
        )
    }
}
