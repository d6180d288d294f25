-- 017_traffic: the user's traffic (issue 34): a request trace replayed at its own timestamps (the `trace` step,
-- load_kind 'trace'), how faithfully a schedule was sent (per request: when it was due; per step: the send-time
-- error's p50, p99 and max), the session and turn of a trace's multi-turn requests, and a step stopped early because its queue kept growing (saturated, stop_reason).
-- Columns are appended in the order of warehouse/contract.py. Units as in 001.

alter table perf_requests add column scheduled_s double;      -- s, when the schedule had it sent; NULL: closed loop
alter table perf_requests add column session_id varchar;       -- a replayed trace's session; NULL: none
alter table perf_requests add column turn integer;             -- depth in its session, 1-based

alter table perf_summary add column send_error_ms_p50 double;  -- ms, actual - scheduled send, median
alter table perf_summary add column send_error_ms_p99 double;  -- ms, p99
alter table perf_summary add column send_error_ms_max double;  -- ms, largest
alter table perf_summary add column saturated boolean;         -- the queue kept growing: the step was stopped early
alter table perf_summary add column stop_reason varchar;       -- the rule that stopped the step, and why
