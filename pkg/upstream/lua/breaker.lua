-- breaker.lua: an upstream's circuit breaker, shared by every worker, with
-- its counts for operators. One script for every step, so each is atomic.
--
-- KEYS[1] -> breaker: hash: state (closed, open, half), fails (failures in
--            a row), until (open until, ms), probe (the half-open probe's
--            lease, ms), cool (429: no call until, ms), streak (429s in a row),
--            and the counts since the upstream was first called: calls, and
--            t:<op> per report other than success
-- KEYS[2] -> minute: hash of this minute's calls and errors by class
-- KEYS[3] -> errors: list of the recent errors (JSON), newest first
-- KEYS[4] -> disabled: the fingerprint of a credential the provider refused
-- ARGV[1] -> op: allow | giveback (a probe not made) | success | failure | throttled | refused | final
-- ARGV[2] -> failures: failures in a row that open the breaker
-- ARGV[3] -> cooldown: ms it stays open
-- ARGV[4] -> throttle: ms the first 429 cools it (doubling)
-- ARGV[5] -> max_throttle: ms
-- ARGV[6] -> probe: ms a half-open probe holds its lease
-- ARGV[7] -> fingerprint: the upstream's credential's
-- ARGV[8] -> error: JSON of the error to keep ('' for none)
--
-- allow returns {verdict, wait ms, state}: ALLOW (call), PROBE (call: the
-- probe), DENY (not now: open, cooling, or a probe is out: wait ms), or
-- DISABLED. giveback and a report return {REPORTED, 0, state after, state
-- before}.

local ALLOW, PROBE, DENY, DISABLED, REPORTED = 1, 2, 0, -1, 3

local breaker_key, minute_key, errors_key, disabled_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op = ARGV[1]
local failures, cooldown, throttle, max_throttle, probe_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local fp, err_json = ARGV[7], ARGV[8]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local v = redis.call('HMGET', breaker_key, 'state', 'fails', 'until', 'probe', 'cool', 'streak')
local state = v[1] or 'closed'
local fails, open_until, probe, cool, streak = tonumber(v[2] or '0'), tonumber(v[3] or '0'), tonumber(v[4] or '0'), tonumber(v[5] or '0'), tonumber(v[6] or '0')

if op == 'allow' then
  if redis.call('GET', disabled_key) == fp then return {DISABLED, 0, state} end
  if cool > now then return {DENY, cool - now, state} end
  if state == 'open' then
    if now < open_until then return {DENY, open_until - now, state} end
    redis.call('HSET', breaker_key, 'state', 'half', 'probe', now + probe_ms)
    return {PROBE, 0, 'half'}
  end
  if state == 'half' then
    if probe > now then return {DENY, probe - now, state} end
    redis.call('HSET', breaker_key, 'probe', now + probe_ms)
    return {PROBE, 0, state}
  end
  return {ALLOW, 0, state}
end

if op == 'giveback' then
  -- A probe allowed and not made (its worker had no quota for it): the
  -- next caller may probe.
  if state == 'half' then redis.call('HSET', breaker_key, 'probe', 0) end
  return {REPORTED, 0, state, state}
end

-- A report: count it for operators, then move the breaker.
redis.call('HINCRBY', minute_key, 'calls', 1)
if op ~= 'success' then redis.call('HINCRBY', minute_key, op, 1) end
redis.call('PEXPIRE', minute_key, 180000)
redis.call('HINCRBY', breaker_key, 'calls', 1)
if op ~= 'success' then redis.call('HINCRBY', breaker_key, 't:' .. op, 1) end
if err_json ~= '' then
  redis.call('LPUSH', errors_key, err_json)
  redis.call('LTRIM', errors_key, 0, 19)
  redis.call('PEXPIRE', errors_key, 86400000)
end

local before = state
if op == 'success' or op == 'final' then
  -- It answered (a final error is the caller's input): closed.
  redis.call('HSET', breaker_key, 'state', 'closed', 'fails', 0, 'probe', 0, 'streak', 0)
  state = 'closed'
elseif op == 'failure' then
  if state ~= 'closed' or fails + 1 >= failures then
    redis.call('HSET', breaker_key, 'state', 'open', 'fails', fails + 1, 'until', now + cooldown, 'probe', 0)
    state = 'open'
  else
    redis.call('HSET', breaker_key, 'fails', fails + 1)
  end
elseif op == 'throttled' then
  -- Its quota, not its health: it cools, longer each time in a row; a
  -- probe that met a 429 gives its lease back.
  local d = math.min(throttle * math.pow(2, math.min(streak, 20)), max_throttle)
  redis.call('HSET', breaker_key, 'cool', now + d, 'streak', streak + 1, 'probe', 0)
elseif op == 'refused' then
  -- The provider refused the credential: disabled until it changes.
  redis.call('SET', disabled_key, fp)
  redis.call('HSET', breaker_key, 'probe', 0)
end
return {REPORTED, 0, state, before}
