//! The schema and the statements, for one schema name (checked to be a plain identifier).

/// The key of the advisory locks of this crate (the first half of the two-key form), so that
/// they do not collide with an application's own advisory locks on one key.
const ADVISORY_CLASS: i32 = 0x6c6b_6b74; // "lkkt"

/// The statements of one schema.
#[derive(Clone, Debug)]
pub(crate) struct Statements {
    pub(crate) schema: String,
    /// `LISTEN` target and `pg_notify` channel: `<schema>_released`.
    pub(crate) channel: String,
    pub(crate) acquire: String,
    pub(crate) release: String,
    pub(crate) abandon: String,
    /// `break_lock(name)`: every holder row it deleted.
    pub(crate) break_lock: String,
    pub(crate) renew: String,
    pub(crate) inspect: String,
    pub(crate) present: String,
    pub(crate) privileges: String,
    /// The elections' objects and statements.
    pub(crate) election: crate::election_sql::ElectionStatements,
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let s = schema;
        let election = crate::election_sql::ElectionStatements::new(s);
        Self {
            schema: s.to_owned(),
            channel: format!("{s}_released"),
            acquire: format!("SELECT o_token, o_left_ms FROM {s}.acquire($1, $2, $3, $4, $5)"),
            release: format!("SELECT {s}.release($1, $2)"),
            abandon: format!("SELECT {s}.abandon($1, $2)"),
            break_lock: format!("SELECT o_meta, o_token, o_since_ms, o_left_ms FROM {s}.break_lock($1)"),
            renew: format!(
                "WITH want AS (SELECT * FROM unnest($1::text[], $2::text[]) AS w(name, owner)), \
                 renewed AS (UPDATE {s}.locks l SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                   FROM want w WHERE l.name = w.name AND l.owner = w.owner RETURNING l.name), \
                 renewed_leaders AS (UPDATE {s}.candidates c \
                   SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                   FROM want w WHERE c.name = w.name AND c.owner = w.owner AND c.token IS NOT NULL \
                     AND c.expires_at > clock_timestamp() RETURNING c.name) \
                 SELECT w.name, w.owner, EXISTS (SELECT 1 FROM renewed r WHERE r.name = w.name) \
                   OR EXISTS (SELECT 1 FROM renewed_leaders r WHERE r.name = w.name), \
                   EXISTS (SELECT 1 FROM {s}.locks l WHERE l.name = w.name) \
                   OR EXISTS (SELECT 1 FROM {s}.candidates c WHERE c.name = w.name AND c.token IS NOT NULL) FROM want w"
            ),
            inspect: format!(
                "SELECT l.meta, l.token, (extract(epoch FROM l.since) * 1000)::bigint, \
                 greatest(0, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000))::bigint, \
                 (SELECT count(*) FROM {s}.waiters w WHERE w.name = $1 AND w.expires_at > clock_timestamp()) \
                 FROM (SELECT 1) AS one LEFT JOIN {s}.locks l ON l.name = $1 AND l.expires_at > clock_timestamp()"
            ),
            present: format!(
                "SELECT to_regclass('{s}.locks') IS NOT NULL AND to_regclass('{s}.tokens') IS NOT NULL \
                 AND to_regprocedure('{s}.acquire(text,text,text,bigint,bigint)') IS NOT NULL \
                 AND to_regprocedure('{s}.release(text,text)') IS NOT NULL \
                 AND to_regclass('{s}.voided') IS NOT NULL \
                 AND to_regclass('{s}.waiters') IS NOT NULL AND to_regclass('{s}.positions') IS NOT NULL \
                 AND to_regprocedure('{s}.abandon(text,text)') IS NOT NULL \
                 AND to_regprocedure('{s}.break_lock(text)') IS NOT NULL{}",
                election.present()
            ),
            privileges: format!(
                "SELECT has_schema_privilege('{s}', 'USAGE'), \
                 has_table_privilege('{s}.locks', 'SELECT, INSERT, UPDATE, DELETE'), \
                 has_sequence_privilege('{s}.tokens', 'USAGE'), \
                 has_function_privilege('{s}.acquire(text,text,text,bigint,bigint)', 'EXECUTE'), \
                 has_function_privilege('{s}.release(text,text)', 'EXECUTE'), \
                 has_table_privilege('{s}.voided', 'SELECT, INSERT, DELETE'), \
                 has_function_privilege('{s}.abandon(text,text)', 'EXECUTE'), \
                 has_table_privilege('{s}.waiters', 'SELECT, INSERT, UPDATE, DELETE'), \
                 has_sequence_privilege('{s}.positions', 'USAGE'), \
                 has_function_privilege('{s}.break_lock(text)', 'EXECUTE'){}",
                election.privileges()
            ),
            election,
        }
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
             GRANT EXECUTE ON FUNCTION {s}.acquire(text,text,text,bigint,bigint), {s}.release(text,text), \
             {s}.abandon(text,text), {s}.break_lock(text) TO {role};{}",
            self.election.grants(role)
        )
    }

    /// The whole schema in one transaction, serialized by an advisory lock so that providers
    /// racing to create it do not fail; every statement is idempotent.
    pub(crate) fn migration(&self) -> String {
        let s = &self.schema;
        let channel = &self.channel;
        let elections = self.election.migration();
        let kind_conflict = crate::election_sql::KIND_CONFLICT;
        format!(
            r#"BEGIN;
SELECT pg_advisory_xact_lock({ADVISORY_CLASS}, 0);
CREATE SCHEMA IF NOT EXISTS {s};
CREATE SEQUENCE IF NOT EXISTS {s}.tokens AS bigint MINVALUE 1;
CREATE TABLE IF NOT EXISTS {s}.locks (
  name text PRIMARY KEY,
  owner text NOT NULL,
  meta text NOT NULL,
  token bigint NOT NULL,
  since timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS {s}.positions AS bigint MINVALUE 1;
CREATE TABLE IF NOT EXISTS {s}.waiters (
  name text NOT NULL,
  owner text NOT NULL,
  pos bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, owner)
);
CREATE TABLE IF NOT EXISTS {s}.voided (
  owner text PRIMARY KEY,
  until timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION {s}.acquire(p_name text, p_owner text, p_meta text, p_lease_ms bigint,
  p_queue_ms bigint, OUT o_token bigint, OUT o_left_ms bigint) LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_owner text;
  v_token bigint;
  v_expires timestamptz;
  v_held boolean;
  v_pos bigint;
  v_ahead_left double precision;
BEGIN
  -- Every grant of a name is serialized here, and its token drawn while this is held, so
  -- tokens of one name increase in commit order even when rows come and go.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  IF EXISTS (SELECT 1 FROM {s}.candidates c WHERE c.name = p_name AND c.expires_at > clock_timestamp()) THEN
    RAISE EXCEPTION USING ERRCODE = '{kind_conflict}',
      MESSAGE = 'the name is in use as an election; a lock needs a name of its own';
  END IF;
  IF EXISTS (SELECT 1 FROM {s}.voided v WHERE v.owner = p_owner) THEN
    -- A late try of an abandoned acquisition (its reply was lost, then it gave up).
    o_left_ms := 0;
    RETURN;
  END IF;
  SELECT l.owner, l.token, l.expires_at INTO v_owner, v_token, v_expires FROM {s}.locks l WHERE l.name = p_name;
  v_held := v_expires IS NOT NULL AND v_expires > clock_timestamp();
  IF v_owner = p_owner THEN
    -- A retry of a grant whose reply was lost: ours already; renew it.
    UPDATE {s}.locks l SET expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
      WHERE l.name = p_name;
    o_token := v_token;
    RETURN;
  END IF;
  -- Fair order: the live waiters that queued before this one (all of them when it has no place).
  SELECT w.pos INTO v_pos FROM {s}.waiters w WHERE w.name = p_name AND w.owner = p_owner;
  SELECT min(extract(epoch FROM w.expires_at - clock_timestamp())) INTO v_ahead_left FROM {s}.waiters w
    WHERE w.name = p_name AND w.owner <> p_owner AND w.expires_at > clock_timestamp()
      AND (v_pos IS NULL OR w.pos < v_pos);
  IF v_held OR v_ahead_left IS NOT NULL THEN
    IF p_queue_ms > 0 THEN
      INSERT INTO {s}.waiters AS w (name, owner, pos, expires_at)
        VALUES (p_name, p_owner, nextval('{s}.positions'), clock_timestamp() + p_queue_ms * interval '1 millisecond')
        ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    END IF;
    IF v_held THEN
      o_left_ms := greatest(1, ceil(extract(epoch FROM v_expires - clock_timestamp()) * 1000))::bigint;
    ELSE
      -- Free, but a waiter ahead has its turn: look again when its place would lapse.
      o_left_ms := greatest(1, ceil(v_ahead_left * 1000))::bigint;
    END IF;
    RETURN;
  END IF;
  DELETE FROM {s}.locks l WHERE l.name = p_name;
  DELETE FROM {s}.waiters w WHERE w.name = p_name AND (w.owner = p_owner OR w.expires_at <= clock_timestamp());
  INSERT INTO {s}.locks AS l (name, owner, meta, token, since, expires_at)
    VALUES (p_name, p_owner, p_meta, nextval('{s}.tokens'), clock_timestamp(),
            clock_timestamp() + p_lease_ms * interval '1 millisecond')
    RETURNING l.token INTO o_token;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.release(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
BEGIN
  DELETE FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
  IF FOUND THEN
    PERFORM pg_notify('{channel}', p_name);
    RETURN true;
  END IF;
  RETURN false;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.abandon(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
BEGIN
  -- Serialized with the grants of the name: a try of this owner still on its way is refused
  -- once this commits, and one that committed before is deleted here.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  DELETE FROM {s}.voided v WHERE v.until < clock_timestamp();
  INSERT INTO {s}.voided AS v (owner, until) VALUES (p_owner, clock_timestamp() + interval '1 hour')
    ON CONFLICT (owner) DO NOTHING;
  DELETE FROM {s}.waiters w WHERE w.name = p_name AND w.owner = p_owner;
  DELETE FROM {s}.locks l WHERE l.name = p_name AND l.owner = p_owner;
  IF FOUND THEN
    PERFORM pg_notify('{channel}', p_name);
    RETURN true;
  END IF;
  RETURN false;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.break_lock(p_name text) RETURNS TABLE (o_owner text, o_meta text,
  o_token bigint, o_since_ms bigint, o_left_ms bigint) LANGUAGE plpgsql AS $lockkit$
BEGIN
  -- Serialized with the grants of the name, like a release. Every holder row of the name
  -- goes (one per owner where a lock has several holders); the holds still live are returned.
  -- Waiters keep their places and wake to take the lock; a broken holder learns it at its
  -- next renewal, which finds its row gone.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  RETURN QUERY
    WITH gone AS (DELETE FROM {s}.locks l WHERE l.name = p_name RETURNING l.*)
    SELECT g.owner, g.meta, g.token, (extract(epoch FROM g.since) * 1000)::bigint,
      greatest(0, ceil(extract(epoch FROM g.expires_at - clock_timestamp()) * 1000))::bigint
    FROM gone g WHERE g.expires_at > clock_timestamp() ORDER BY g.token;
  PERFORM pg_notify('{channel}', p_name);
END
$lockkit$;
{elections}
COMMIT;"#
        )
    }
}
