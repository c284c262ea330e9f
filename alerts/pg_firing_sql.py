"""The two statements of a firing on PostgreSQL (alerts/pg_store.py ``PgAlertStore.fire`` runs them in
one transaction; its docstring says why they are shaped this way)."""

TAKE = """
WITH taken AS (
    DELETE FROM alerts WHERE id IN (SELECT id FROM alerts WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE)
    RETURNING id, principal, record
)
SELECT taken.id, taken.record, taken.principal, s.principal IS NOT NULL AS subscribed,
       s.symbols, s.alert_types, s.channels
FROM taken LEFT JOIN push_subscriptions s ON s.principal = taken.principal
"""
"""Lock (in id order) and remove the alerts still armed, with their owners' push subscriptions."""

RECORD = """
WITH counters AS (
    INSERT INTO principal_counters AS c (principal, push_seq, push_queued, poll_queued)
    SELECT * FROM unnest($1::text[], $2::bigint[], $2::bigint[], $3::bigint[])
    ON CONFLICT (principal) DO UPDATE SET push_seq = c.push_seq + excluded.push_seq,
        push_queued = c.push_queued + excluded.push_queued, poll_queued = c.poll_queued + excluded.poll_queued
    RETURNING principal, push_seq, push_queued, poll_queued
), events AS (
    INSERT INTO alert_events (alert_id, principal, outcome, at, value, bar_time, record)
    SELECT a, p, 'fired', t, v, b, r
    FROM unnest($4::text[], $5::text[], $6::float8[], $7::float8[], $8::bigint[], $9::text[]) AS x(a, p, t, v, b, r)
), notified AS (
    INSERT INTO notifications (alert_id, principal, payload, created_at)
    SELECT a, p, payload, $11 FROM unnest($4::text[], $5::text[], $10::text[]) AS x(a, p, payload)
    ON CONFLICT (alert_id) DO NOTHING
), frames AS (
    SELECT x.a, x.frame, al.principal,
           row_number() OVER (PARTITION BY al.principal ORDER BY x.n) AS rank,
           count(*) OVER (PARTITION BY al.principal) AS k
    FROM unnest($12::text[], $13::text[]) WITH ORDINALITY AS x(a, frame, n)
    JOIN unnest($4::text[], $5::text[]) AS al(a, principal) ON al.a = x.a
), queued AS (
    INSERT INTO push_queue (principal, seq, alert_id, frame, enqueued_at)
    SELECT f.principal, c.push_seq - f.k + f.rank, f.a, f.frame, $11
    FROM frames f JOIN counters c ON c.principal = f.principal
    ON CONFLICT DO NOTHING
    RETURNING alert_id, seq
)
SELECT NULL AS alert_id, NULL::bigint AS seq, principal, push_queued, poll_queued FROM counters
UNION ALL
SELECT alert_id, seq, NULL, NULL, NULL FROM queued
"""
"""In one statement: move each principal's counters (push sequence numbers in commit order), record the
audit rows, queue the poll notifications and the push frames with their sequence numbers (the i-th of a
principal's n frames gets ``push_seq - n + i``); returns the counters and each frame's number."""
