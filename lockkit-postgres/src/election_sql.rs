//! The election's schema objects and statements, for one schema name: tables and functions of
//! their own next to the lock table's (see [`crate::election`] for the design).

/// The key of the advisory locks of this crate; the same as the lock table's, so that a
/// campaign and a lock grant of one name are serialized by one advisory lock.
const ADVISORY_CLASS: i32 = 0x6c6b_6b74; // "lkkt"

/// How many journal entries each election keeps: an observer cut off while more terms passed
/// hears of a gap.
pub(crate) const JOURNAL_RETAINED: u32 = 1000;

/// The SQLSTATE the functions raise when a name is in use as the other kind (a lock name
/// asked for as an election, or the reverse).
pub(crate) const KIND_CONFLICT: &str = "LKK01";

/// The prefix of the notification payloads of elections: `%` never starts a stored name but
/// as `%25` or `%00`, so a payload `%e/<name>` names no lock.
pub(crate) const PAYLOAD_PREFIX: &str = "%e/";

/// The statements of the elections of one schema.
#[derive(Clone, Debug)]
pub(crate) struct ElectionStatements {
    schema: String,
    /// The `NOTIFY` channel of elections: `<schema>_elections`.
    pub(crate) channel: String,
    pub(crate) campaign: String,
    pub(crate) resign: String,
    pub(crate) abandon: String,
    pub(crate) observe: String,
    pub(crate) inspect: String,
}

impl ElectionStatements {
    pub(crate) fn new(schema: &str) -> Self {
        let s = schema;
        Self {
            schema: s.to_owned(),
            channel: format!("{s}_elections"),
            campaign: format!("SELECT o_token, o_left_ms FROM {s}.campaign($1, $2, $3, $4, $5, $6)"),
            resign: format!("SELECT {s}.resign($1, $2)"),
            abandon: format!("SELECT {s}.abandon_candidacy($1, $2)"),
            observe: format!(
                "SELECT o_kind, o_id, o_token, o_identity, o_since_ms, o_left_ms FROM {s}.observe_election($1, $2)"
            ),
            inspect: format!(
                "SELECT c.meta, c.token, (extract(epoch FROM c.since) * 1000)::bigint, \
                 greatest(0, ceil(extract(epoch FROM c.expires_at - clock_timestamp()) * 1000))::bigint, \
                 c.identity, \
                 (SELECT count(*) FROM {s}.candidates w WHERE w.name = $1 AND w.token IS NULL \
                   AND w.expires_at > clock_timestamp()) \
                 FROM (SELECT 1) AS one LEFT JOIN {s}.candidates c ON c.name = $1 AND c.token IS NOT NULL \
                   AND c.expires_at > clock_timestamp()"
            ),
        }
    }

    /// The `AND …` conditions that the election's objects exist, for the schema check.
    pub(crate) fn present(&self) -> String {
        let s = &self.schema;
        format!(
            " AND to_regclass('{s}.candidates') IS NOT NULL AND to_regclass('{s}.terms') IS NOT NULL \
             AND to_regclass('{s}.elections') IS NOT NULL \
             AND to_regprocedure('{s}.campaign(text,text,bytea,text,bigint,bigint)') IS NOT NULL \
             AND to_regprocedure('{s}.resign(text,text)') IS NOT NULL \
             AND to_regprocedure('{s}.abandon_candidacy(text,text)') IS NOT NULL \
             AND to_regprocedure('{s}.observe_election(text,bigint)') IS NOT NULL"
        )
    }

    /// The `, has_…_privilege(…)` columns of the privilege check.
    pub(crate) fn privileges(&self) -> String {
        let s = &self.schema;
        format!(
            ", has_table_privilege('{s}.candidates', 'SELECT, INSERT, UPDATE, DELETE'), \
             has_table_privilege('{s}.terms', 'SELECT, INSERT, DELETE'), \
             has_table_privilege('{s}.elections', 'SELECT, INSERT, UPDATE'), \
             has_function_privilege('{s}.campaign(text,text,bytea,text,bigint,bigint)', 'EXECUTE'), \
             has_function_privilege('{s}.resign(text,text)', 'EXECUTE'), \
             has_function_privilege('{s}.abandon_candidacy(text,text)', 'EXECUTE'), \
             has_function_privilege('{s}.observe_election(text,bigint)', 'EXECUTE')"
        )
    }

    /// The `GRANT`s of the election's objects for `role`.
    pub(crate) fn grants(&self, role: &str) -> String {
        let s = &self.schema;
        format!(
            " GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.candidates TO {role}; \
             GRANT SELECT, INSERT, DELETE ON {s}.terms TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON {s}.elections TO {role}; \
             GRANT EXECUTE ON FUNCTION {s}.campaign(text,text,bytea,text,bigint,bigint), {s}.resign(text,text), \
             {s}.abandon_candidacy(text,text), {s}.observe_election(text,bigint), \
             {s}.election_journal(text,bigint,bytea,timestamptz), {s}.election_settle(text) TO {role};"
        )
    }

    /// The election's part of the migration, inside its transaction (after the lock table's
    /// objects: it uses the sequences `tokens` and `positions` and the table `voided`).
    pub(crate) fn migration(&self) -> String {
        let s = &self.schema;
        let channel = &self.channel;
        let retained = JOURNAL_RETAINED;
        format!(
            r#"
-- Elections: every candidate of a name has a row; the leader's has the term (a token from
-- the same sequence as the locks'), the others wait in `pos` order.
CREATE TABLE IF NOT EXISTS {s}.candidates (
  name text NOT NULL,
  owner text NOT NULL,
  identity bytea NOT NULL,
  meta text NOT NULL,
  pos bigint NOT NULL,
  token bigint,
  since timestamptz,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, owner)
);
CREATE UNIQUE INDEX IF NOT EXISTS candidates_leader ON {s}.candidates (name) WHERE token IS NOT NULL;
-- The journal of every term and vacancy (token NULL), ids from `positions`, the last
-- {retained} entries of each election kept; `elections.trimmed` is the last id trimmed.
CREATE TABLE IF NOT EXISTS {s}.terms (
  id bigint PRIMARY KEY,
  name text NOT NULL,
  token bigint,
  identity bytea,
  since timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS terms_name ON {s}.terms (name, id);
CREATE TABLE IF NOT EXISTS {s}.elections (
  name text PRIMARY KEY,
  trimmed bigint NOT NULL
);
CREATE OR REPLACE FUNCTION {s}.election_journal(p_name text, p_token bigint, p_identity bytea, p_since timestamptz)
  RETURNS void LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_cut bigint;
BEGIN
  INSERT INTO {s}.terms (id, name, token, identity, since)
    VALUES (nextval('{s}.positions'), p_name, p_token, p_identity, p_since);
  SELECT t.id INTO v_cut FROM {s}.terms t WHERE t.name = p_name ORDER BY t.id DESC OFFSET {retained} LIMIT 1;
  IF v_cut IS NOT NULL THEN
    DELETE FROM {s}.terms t WHERE t.name = p_name AND t.id <= v_cut;
    INSERT INTO {s}.elections AS e (name, trimmed) VALUES (p_name, v_cut)
      ON CONFLICT (name) DO UPDATE SET trimmed = greatest(e.trimmed, EXCLUDED.trimmed);
  END IF;
  PERFORM pg_notify('{channel}', '{PAYLOAD_PREFIX}' || p_name);
END
$lockkit$;
-- Under the name's advisory lock: a leader whose lease ran out (or whose row was deleted)
-- is gone, and the journal says so once.
CREATE OR REPLACE FUNCTION {s}.election_settle(p_name text) RETURNS void LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_token bigint;
  v_last_id bigint;
  v_last_token bigint;
BEGIN
  DELETE FROM {s}.candidates c WHERE c.name = p_name AND c.token IS NOT NULL AND c.expires_at <= clock_timestamp();
  SELECT c.token INTO v_token FROM {s}.candidates c WHERE c.name = p_name AND c.token IS NOT NULL;
  SELECT t.id, t.token INTO v_last_id, v_last_token FROM {s}.terms t WHERE t.name = p_name ORDER BY t.id DESC LIMIT 1;
  IF v_token IS NULL AND v_last_token IS NOT NULL THEN
    PERFORM {s}.election_journal(p_name, NULL, NULL, clock_timestamp());
  END IF;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.campaign(p_name text, p_owner text, p_identity bytea, p_meta text,
  p_lease_ms bigint, p_queue_ms bigint, OUT o_token bigint, OUT o_left_ms bigint) LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_leader text;
  v_token bigint;
  v_expires timestamptz;
  v_since timestamptz;
  v_pos bigint;
  v_ahead_left double precision;
  v_fence bigint := 0;
BEGIN
  -- The same advisory lock as the lock grants of the name: kinds are checked, terms drawn and
  -- journaled in commit order.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  IF EXISTS (SELECT 1 FROM {s}.locks l WHERE l.name = p_name AND l.expires_at > clock_timestamp()) THEN
    RAISE EXCEPTION USING ERRCODE = '{KIND_CONFLICT}',
      MESSAGE = 'the name is held as a lock; an election needs a name of its own';
  END IF;
  IF EXISTS (SELECT 1 FROM {s}.voided v WHERE v.owner = p_owner) THEN
    -- A late try of an abandoned campaign (its reply was lost, then it gave up).
    o_left_ms := 0;
    RETURN;
  END IF;
  PERFORM {s}.election_settle(p_name);
  SELECT c.owner, c.token, c.expires_at INTO v_leader, v_token, v_expires
    FROM {s}.candidates c WHERE c.name = p_name AND c.token IS NOT NULL;
  IF v_leader = p_owner THEN
    -- A retry of a grant whose reply was lost: this candidacy leads already; renew it.
    UPDATE {s}.candidates c SET expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
      WHERE c.name = p_name AND c.owner = p_owner;
    o_token := v_token;
    RETURN;
  END IF;
  SELECT c.pos INTO v_pos FROM {s}.candidates c WHERE c.name = p_name AND c.owner = p_owner;
  SELECT min(extract(epoch FROM c.expires_at - clock_timestamp())) INTO v_ahead_left FROM {s}.candidates c
    WHERE c.name = p_name AND c.token IS NULL AND c.owner <> p_owner AND c.expires_at > clock_timestamp()
      AND (v_pos IS NULL OR c.pos < v_pos);
  IF v_leader IS NULL AND v_ahead_left IS NULL THEN
    -- The restart fence holds terms back as it holds lock grants (see fence_ms).
    v_fence := {s}.fence_ms();
  END IF;
  IF v_leader IS NOT NULL OR v_ahead_left IS NOT NULL OR v_fence > 0 THEN
    IF p_queue_ms > 0 THEN
      INSERT INTO {s}.candidates AS c (name, owner, identity, meta, pos, expires_at)
        VALUES (p_name, p_owner, p_identity, p_meta, nextval('{s}.positions'),
                clock_timestamp() + p_queue_ms * interval '1 millisecond')
        ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    END IF;
    IF v_fence > 0 THEN
      o_left_ms := v_fence;
    ELSIF v_leader IS NOT NULL THEN
      o_left_ms := greatest(1, ceil(extract(epoch FROM v_expires - clock_timestamp()) * 1000))::bigint;
    ELSE
      o_left_ms := greatest(1, ceil(v_ahead_left * 1000))::bigint;
    END IF;
    RETURN;
  END IF;
  DELETE FROM {s}.candidates c WHERE c.name = p_name AND c.token IS NULL
    AND (c.owner = p_owner OR c.expires_at <= clock_timestamp());
  INSERT INTO {s}.candidates AS c (name, owner, identity, meta, pos, token, since, expires_at)
    VALUES (p_name, p_owner, p_identity, p_meta, coalesce(v_pos, nextval('{s}.positions')), {s}.next_token(),
            clock_timestamp(), clock_timestamp() + p_lease_ms * interval '1 millisecond')
    RETURNING c.token, c.since INTO o_token, v_since;
  PERFORM {s}.election_journal(p_name, o_token, p_identity, v_since);
END
$lockkit$;
-- A leader resigns (true), or a waiting candidate leaves (false); the journal records the
-- vacancy and the notification wakes the next candidate and the observers.
CREATE OR REPLACE FUNCTION {s}.resign(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_token bigint;
BEGIN
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  DELETE FROM {s}.candidates c WHERE c.name = p_name AND c.owner = p_owner RETURNING c.token INTO v_token;
  IF v_token IS NOT NULL THEN
    PERFORM {s}.election_journal(p_name, NULL, NULL, clock_timestamp());
    RETURN true;
  END IF;
  RETURN false;
END
$lockkit$;
CREATE OR REPLACE FUNCTION {s}.abandon_candidacy(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $lockkit$
BEGIN
  -- Serialized with the campaigns of the name: a try of this owner still on its way is
  -- refused once this commits, and one that committed before is undone here.
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  DELETE FROM {s}.voided v WHERE v.until < clock_timestamp();
  INSERT INTO {s}.voided AS v (owner, until) VALUES (p_owner, clock_timestamp() + interval '1 hour')
    ON CONFLICT (owner) DO NOTHING;
  RETURN {s}.resign(p_name, p_owner);
END
$lockkit$;
-- What an observer that saw the journal up to `p_after` (NULL: nothing yet) needs: the
-- entries after it ('change'), then the state now ('now'); or, when entries after it were
-- trimmed (or it saw nothing yet), the state now alone ('restart').
CREATE OR REPLACE FUNCTION {s}.observe_election(p_name text, p_after bigint)
  RETURNS TABLE (o_kind text, o_id bigint, o_token bigint, o_identity bytea, o_since_ms bigint, o_left_ms bigint)
  LANGUAGE plpgsql AS $lockkit$
DECLARE
  v_last bigint;
  v_trimmed bigint;
BEGIN
  PERFORM pg_advisory_xact_lock({ADVISORY_CLASS}, hashtext(p_name));
  PERFORM {s}.election_settle(p_name);
  SELECT coalesce(max(t.id), 0) INTO v_last FROM {s}.terms t WHERE t.name = p_name;
  SELECT e.trimmed INTO v_trimmed FROM {s}.elections e WHERE e.name = p_name;
  IF p_after IS NULL OR p_after < coalesce(v_trimmed, 0) OR p_after > v_last THEN
    o_kind := 'restart';
  ELSE
    o_kind := 'now';
    RETURN QUERY SELECT 'change'::text, t.id, t.token, t.identity, (extract(epoch FROM t.since) * 1000)::bigint,
        NULL::bigint
      FROM {s}.terms t WHERE t.name = p_name AND t.id > p_after ORDER BY t.id;
  END IF;
  RETURN QUERY SELECT o_kind, v_last, c.token, c.identity, (extract(epoch FROM c.since) * 1000)::bigint,
      greatest(0, ceil(extract(epoch FROM c.expires_at - clock_timestamp()) * 1000))::bigint
    FROM (SELECT 1) AS one LEFT JOIN {s}.candidates c ON c.name = p_name AND c.token IS NOT NULL;
END
$lockkit$;
"#
        )
    }
}
