-- unattempt.lua: gives back a sign-in attempt counted under a name that
-- was never checked (no hashing slot, a dependency that failed), in one
-- step: the count never goes below zero, is never made where there is
-- none, and keeps its window.
--
-- KEYS[1] -> count: the attempts counted under the name
--
-- Returns {GIVEN, attempts left}.

local GIVEN = 1

local count_key = KEYS[1]

local n = tonumber(redis.call('GET', count_key) or '0')
if n > 0 then n = redis.call('DECR', count_key) end
return {GIVEN, n}
