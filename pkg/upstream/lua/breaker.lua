-- breaker.lua: an upstream's circuit breaker, shared by every worker, with
-- its counts for operators. One script for every step, so each is atomic.
--
-- KEYS[1] -> breaker: hash: state (closed, open, half), fails (failures in
--            a row), until (open until, ms), probe (the half-open probe's
--            lease, ms), cool (429: no call until, ms), streak (429s in a row)
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
-- allow returns {verdict, wait ms, state}: verdict 1 (call), 2 (call: the
-- probe), 0 (not now: open, cooling, or a probe is out), -1 (disabled).
-- A report returns {state before, state after}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]
local failures, cooldown, throttle, max_throttle, probe_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local fp = ARGV[7]

local v = redis.call('HMGET', KEYS[1], 'state', 'fails', 'until', 'probe', 'cool', 'streak')
local state = v[1] or 'closed'
local fails, open_until, probe, cool, streak = tonumber(v[2] or '0'), tonumber(v[3] or '0'), tonumber(v[4] or '0'), tonumber(v[5] or '0'), tonumber(v[6] or '0')

if op == 'allow' then
  if redis.call('GET', KEYS[4]) == fp then return {-1, 0, state} end
  if cool > now then return {0, cool - now, state} end
  if state == 'open' then
    if now < open_until then return {0, open_until - now, state} end
    redis.call('HSET', KEYS[1], 'state', 'half', 'probe', now + probe_ms)
    return {2, 0, 'half'}
  end
  if state == 'half' then
    if probe > now then return {0, probe - now, state} end
    redis.call('HSET', KEYS[1], 'probe', now + probe_ms)
    return {2, 0, state}
  end
  return {1, 0, state}
end

if op == 'giveback' then
  -- A probe allowed and not made (its worker had no quota for it): the
  -- next caller may probe.
  if state == 'half' then redis.call('HSET', KEYS[1], 'probe', 0) end
  return {state, state}
end

-- A report: count it for operators, then move the breaker.
local class = op
redis.call('HINCRBY', KEYS[2], 'calls', 1)
if op ~= 'success' then redis.call('HINCRBY', KEYS[2], op, 1) end
redis.call('PEXPIRE', KEYS[2], 180000)
if ARGV[8] ~= '' then
  redis.call('LPUSH', KEYS[3], ARGV[8])
  redis.call('LTRIM', KEYS[3], 0, 19)
  redis.call('PEXPIRE', KEYS[3], 86400000)
end

local before = state
if op == 'success' or op == 'final' then
  -- It answered (a final error is the caller's input): closed.
  redis.call('HSET', KEYS[1], 'state', 'closed', 'fails', 0, 'probe', 0, 'streak', 0)
  state = 'closed'
elseif op == 'failure' then
  if state ~= 'closed' or fails + 1 >= failures then
    redis.call('HSET', KEYS[1], 'state', 'open', 'fails', fails + 1, 'until', now + cooldown, 'probe', 0)
    state = 'open'
  else
    redis.call('HSET', KEYS[1], 'fails', fails + 1)
  end
elseif op == 'throttled' then
  -- Its quota, not its health: it cools, longer each time in a row; a
  -- probe that met a 429 gives its lease back.
  local d = math.min(throttle * math.pow(2, math.min(streak, 20)), max_throttle)
  redis.call('HSET', KEYS[1], 'cool', now + d, 'streak', streak + 1, 'probe', 0)
elseif op == 'refused' then
  -- The provider refused the credential: disabled until it changes.
  redis.call('SET', KEYS[4], fp)
  redis.call('HSET', KEYS[1], 'probe', 0)
end
return {before, state}
