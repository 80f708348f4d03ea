"""The shared state's Lua scripts: each runs atomically in the store (Redis or Valkey run
one script at a time), so that two replicas can never both take one saved sample.

Keys, under the run's prefix P (docs/state.md): `P:epoch` (the resets so far),
`P:e{epoch}:taken:{cursor}` (a bit string: the sample at place i is bit i),
`P:e{epoch}:pending:{cursor}` (a hash, place -> the replica whose answer is on its way),
`P:alive:{replica}` (its heartbeat, which expires), `P:journal` (the stream of events).
A pending place whose replica's heartbeat is gone is free: that replica died, and its
answer, if it was ever sent, is not counted. Whoever frees it journals it as an answer
never delivered (`GIVEN_BACK`), in the dead replica's name: the client of that request got
no answer there, and a resend of it may have had a later sample than the saved order gave
it, so `run` fails on it, as on any answer that never left. A store without `P:shape` has
lost the state (restarted without persisting it): no script decides anything from it (-1).
"""

# Frees a place pending on a dead replica (`who`), journaled as its answer undelivered.
GIVEN_BACK = """
local function given_back(prefix, pending, place, who)
  redis.call('HDEL', pending, place)
  redis.call('XADD', prefix .. ':journal', '*', 'e', cjson.encode({
    kind = 'undelivered', replica = tonumber(who), model = cjson.null,
    endpoint = cjson.null, died = true}))
end
"""

# ARGV: prefix, cursor -> {epoch, taken bits, places pending on a live replica}
READ = GIVEN_BACK + """
local prefix, cursor = ARGV[1], ARGV[2]
if redis.call('EXISTS', prefix .. ':shape') == 0 then return {-1} end
local epoch = redis.call('GET', prefix .. ':epoch') or '0'
local base = prefix .. ':e' .. epoch .. ':'
local taken = redis.call('GET', base .. 'taken:' .. cursor) or ''
local pending = redis.call('HGETALL', base .. 'pending:' .. cursor)
local live = {}
for i = 1, #pending, 2 do
  if redis.call('EXISTS', prefix .. ':alive:' .. pending[i + 1]) == 1 then
    table.insert(live, tonumber(pending[i]))
  else
    given_back(prefix, base .. 'pending:' .. cursor, pending[i], pending[i + 1])
  end
end
return {epoch, taken, live}
"""

# ARGV: prefix, epoch, replica, then cursor, place pairs -> 1 claimed, 0 taken first
CLAIM = GIVEN_BACK + """
local prefix, replica = ARGV[1], ARGV[3]
if redis.call('EXISTS', prefix .. ':shape') == 0 then return -1 end
local epoch = redis.call('GET', prefix .. ':epoch') or '0'
if epoch ~= ARGV[2] then return 0 end
local base = prefix .. ':e' .. epoch .. ':'
for i = 4, #ARGV, 2 do
  if redis.call('GETBIT', base .. 'taken:' .. ARGV[i], ARGV[i + 1]) == 1 then return 0 end
  local who = redis.call('HGET', base .. 'pending:' .. ARGV[i], ARGV[i + 1])
  if who and redis.call('EXISTS', prefix .. ':alive:' .. who) == 1 then return 0 end
end
for i = 4, #ARGV, 2 do
  local who = redis.call('HGET', base .. 'pending:' .. ARGV[i], ARGV[i + 1])
  if who then given_back(prefix, base .. 'pending:' .. ARGV[i], ARGV[i + 1], who) end
  redis.call('HSET', base .. 'pending:' .. ARGV[i], ARGV[i + 1], replica)
end
return 1
"""

# ARGV: prefix, epoch, replica, event, then cursor, place pairs -> 1 when a place may have
# been given to another replica meanwhile (this one's heartbeat lapsed), else 0
COMMIT = """
local prefix, replica = ARGV[1], ARGV[3]
local lost = 0
if redis.call('EXISTS', prefix .. ':alive:' .. replica) == 0 then lost = 1 end
if redis.call('EXISTS', prefix .. ':shape') == 0 then lost = 1 end
local epoch = redis.call('GET', prefix .. ':epoch') or '0'
if epoch == ARGV[2] then
  local base = prefix .. ':e' .. epoch .. ':'
  for i = 5, #ARGV, 2 do
    local cursor, place = ARGV[i], ARGV[i + 1]
    local who = redis.call('HGET', base .. 'pending:' .. cursor, place)
    if who == replica then
      redis.call('HDEL', base .. 'pending:' .. cursor, place)
    elseif who then
      lost = 1  -- (another replica holds it now: it is that one's to commit)
    else
      lost = 1  -- (freed as this one's heartbeat lapsed: taken, unless taken already)
    end
    if not who or who == replica then
      if redis.call('SETBIT', base .. 'taken:' .. cursor, place, 1) == 1 then lost = 1 end
    end
  end
end
redis.call('XADD', prefix .. ':journal', '*', 'e', ARGV[4])
return lost
"""

# ARGV: prefix, epoch, replica, event, then cursor, place pairs: the places given back
RELEASE = """
local prefix, replica = ARGV[1], ARGV[3]
local epoch = redis.call('GET', prefix .. ':epoch') or '0'
if epoch == ARGV[2] then
  local base = prefix .. ':e' .. epoch .. ':'
  for i = 5, #ARGV, 2 do
    if redis.call('HGET', base .. 'pending:' .. ARGV[i], ARGV[i + 1]) == replica then
      redis.call('HDEL', base .. 'pending:' .. ARGV[i], ARGV[i + 1])
    end
  end
end
redis.call('XADD', prefix .. ':journal', '*', 'e', ARGV[4])
return 0
"""

# ARGV: prefix, replica, ms -> 1: `run`'s hold is still this replica's (kept ms more);
# 0: it lapsed, and is another's or none's (never taken back: two rescorings would mix)
REFRESH = """
if redis.call('GET', ARGV[1] .. ':run') ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', ARGV[1] .. ':run', ARGV[3])
return 1
"""

# ARGV: prefix, event -> the stream id of the reset: a new epoch, every cursor free
RESET = """
redis.call('INCR', ARGV[1] .. ':epoch')
return redis.call('XADD', ARGV[1] .. ':journal', '*', 'e', ARGV[2])
"""
