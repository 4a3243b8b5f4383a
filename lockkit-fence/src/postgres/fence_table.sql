-- lockkit-fence: the fence on the application's own rows (PgFencedTable). Part of the
-- migration; `{schema}` is replaced by the fence's schema.
-- fence_table(table, lock column, token column) adds the two columns to the table and two
-- row triggers: a write (INSERT, UPDATE, the UPDATE of an upsert) must set both columns, and
-- is refused below the row's token (LKF01, DETAIL the row's token) or under another lock
-- (LKF02, DETAIL the row's lock); a DELETE is refused unless the transaction set
-- lockkit.lock_id and lockkit.token (set_config(..., true)) and they admit the row.
-- Idempotent; the trigger functions are generated per table (fence_row_<table oid>), with the
-- column names written in, so a write pays for no dynamic column access. (The check as the
-- triggers' WHEN conditions, so that an admitted write runs no plpgsql, was measured slower:
-- the executor prepares a WHEN expression at each statement, plpgsql keeps its plan.)
CREATE OR REPLACE FUNCTION {schema}.fence_table(p_table regclass, p_lock_column name DEFAULT 'lockkit_lock', p_token_column name DEFAULT 'lockkit_token')
RETURNS void
LANGUAGE plpgsql
AS $fence_table$
DECLARE
    v_function text := format('{schema}.%I', 'fence_row_' || p_table::oid);
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('{schema}.fence_table ' || p_table::oid));
    IF p_lock_column IS NULL OR p_token_column IS NULL OR p_lock_column = p_token_column THEN
        RAISE EXCEPTION 'lockkit fence: give two different column names, for the lock identity and for the token'
            USING ERRCODE = 'LKF03';
    END IF;
    EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS %I text, ADD COLUMN IF NOT EXISTS %I bigint',
                   p_table, p_lock_column, p_token_column);
    -- The row's own fence: the lock it is bound to and the highest token of a write, checked
    -- against the row as it is when the write has it locked (after any concurrent writer).
    EXECUTE format($body$
CREATE OR REPLACE FUNCTION %1$s() RETURNS trigger LANGUAGE plpgsql AS $row$
BEGIN
    IF NEW.%2$I IS NULL OR NEW.%2$I = '' OR NEW.%3$I IS NULL OR NEW.%3$I < 0 THEN
        RAISE EXCEPTION 'lockkit fence: a write of %%.%% must set %2$s (the lock identity, $LOCKKIT_LOCK_ID) and %3$s (the token, $LOCKKIT_FENCING_TOKEN)', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'LKF03';
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.%2$I IS NOT NULL THEN
        IF NEW.%2$I <> OLD.%2$I THEN
            RAISE EXCEPTION 'lockkit fence: a row of %%.%% is fenced by lock %%, not by %%', TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.%2$I, NEW.%2$I
                USING ERRCODE = 'LKF02', DETAIL = OLD.%2$I,
                      HINT = 'tokens of different locks cannot be compared; write it under the lock that guards it';
        END IF;
        IF NEW.%3$I < OLD.%3$I THEN
            RAISE EXCEPTION 'lockkit fence: stale fencing token %% for a row of %%.%%: a write with token %% was accepted', NEW.%3$I, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.%3$I
                USING ERRCODE = 'LKF01', DETAIL = OLD.%3$I::text,
                      HINT = 'a newer holder of the lock has written since: stop, and roll back';
        END IF;
    END IF;
    RETURN NEW;
END
$row$;
CREATE OR REPLACE FUNCTION %1$s_delete() RETURNS trigger LANGUAGE plpgsql AS $row$
DECLARE
    v_lock text := nullif(current_setting('lockkit.lock_id', true), '');
    v_token bigint := nullif(current_setting('lockkit.token', true), '')::bigint;
BEGIN
    IF v_lock IS NULL OR v_token IS NULL THEN
        RAISE EXCEPTION 'lockkit fence: a delete from %%.%% needs the fence of the transaction', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'LKF03',
                  HINT = 'run SELECT set_config(''lockkit.lock_id'', <lock id>, true), set_config(''lockkit.token'', <token>, true) in the transaction first';
    END IF;
    IF OLD.%2$I IS NOT NULL THEN
        IF v_lock <> OLD.%2$I THEN
            RAISE EXCEPTION 'lockkit fence: a row of %%.%% is fenced by lock %%, not by %%', TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.%2$I, v_lock
                USING ERRCODE = 'LKF02', DETAIL = OLD.%2$I;
        END IF;
        IF v_token < OLD.%3$I THEN
            RAISE EXCEPTION 'lockkit fence: stale fencing token %% for a row of %%.%%: a write with token %% was accepted', v_token, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.%3$I
                USING ERRCODE = 'LKF01', DETAIL = OLD.%3$I::text;
        END IF;
    END IF;
    RETURN OLD;
END
$row$;
$body$, v_function, p_lock_column, p_token_column);
    EXECUTE format('CREATE OR REPLACE TRIGGER lockkit_fence_write BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()', p_table, v_function);
    EXECUTE format('CREATE OR REPLACE TRIGGER lockkit_fence_delete BEFORE DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s_delete()', p_table, v_function);
END
$fence_table$;
