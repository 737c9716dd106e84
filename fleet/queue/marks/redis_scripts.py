"""The queue mark's Lua scripts (:mod:`.redis_store`): each runs atomically in Redis, in one round trip."""

# A mark is "<eta> <not before>" in Unix seconds ("0": none), then one line per change to check
# (or FULL).
# KEYS: the mark, the Kyma's "spaced until" hint, its busy flag. ARGV: eta, need ("0": none), ttl,
# skew, now, changes (one per line, "" for none), most changes per mark, need when there are more
# ("0": none), how long the Kyma counts as busy after this event (ms) when the hint raised its
# claim or a task was queued already.
# Returns {1, eta} when it claimed the mark (the ETA raised to the hint), else {0, the later of the
# mark's ETA and its "not before"}: the queued task reads the runtime no earlier than that.
CLAIM_ONE = """
local value = redis.call('get', KEYS[1])
if not value then
  local eta = ARGV[1]
  local spaced = redis.call('get', KEYS[2])
  if spaced and tonumber(spaced) > tonumber(eta) then
    eta = spaced
    redis.call('set', KEYS[3], '1', 'PX', ARGV[9])
  end
  local fresh = eta .. ' 0'
  if ARGV[6] ~= '' then fresh = fresh .. '\\n' .. ARGV[6] end
  redis.call('set', KEYS[1], fresh, 'EX', ARGV[3])
  return {1, eta}
end
-- A task is queued already: the runtime changes again before it ran.
redis.call('set', KEYS[3], '1', 'PX', ARGV[9])
local head, tail = value, ''
local newline = string.find(value, '\\n', 1, true)
if newline then
  head = string.sub(value, 1, newline - 1)
  tail = string.sub(value, newline)
end
local need = tonumber(ARGV[2])
local wanted = ARGV[2]
local changed = false
local overflow = false
if ARGV[6] ~= '' then
  local _, count = string.gsub(tail, '\\n', '')
  for change in string.gmatch(ARGV[6], '[^\\n]+') do
    if not string.find(tail .. '\\n', '\\n' .. change .. '\\n', 1, true) then
      if count < tonumber(ARGV[7]) or change == '*' then
        tail = tail .. '\\n' .. change
        count = count + 1
        changed = true
      else
        overflow = true
        if tonumber(ARGV[8]) > need then need, wanted = tonumber(ARGV[8]), ARGV[8] end
      end
    end
  end
  -- A change left out: the task no longer knows every change, so it reads everything.
  if overflow and not string.find(tail .. '\\n', '\\n*\\n', 1, true) then
    tail = tail .. '\\n*'
    changed = true
  end
end
local space = string.find(head, ' ', 1, true)
local eta = '0'
local not_before = '0'
if space then
  eta = string.sub(head, 1, space - 1)
  not_before = string.sub(head, space + 1)
end
if need > 0 and (tonumber(eta) or 0) < need + tonumber(ARGV[4]) and (tonumber(not_before) or 0) < need then
  not_before = wanted
  changed = true
  -- The mark must outlive the wait it now asks for (else the task would start without it), but
  -- never beyond its own TTL counted from its ETA: a mark whose task was lost still expires.
  local keep = math.floor((need - tonumber(ARGV[5]) + 1) * 1000)
  local limit = math.floor(((tonumber(eta) or 0) + tonumber(ARGV[3]) + 1 - tonumber(ARGV[5])) * 1000)
  if keep > limit then keep = limit end
  redis.call('set', KEYS[1], eta .. ' ' .. not_before .. tail, 'KEEPTTL')
  if keep > 0 and redis.call('pttl', KEYS[1]) < keep then redis.call('pexpire', KEYS[1], keep) end
elseif changed then
  redis.call('set', KEYS[1], eta .. ' ' .. not_before .. tail, 'KEEPTTL')
end
if (tonumber(not_before) or 0) > (tonumber(eta) or 0) then return {0, not_before} end
return {0, eta}
"""

# A request that asks for a full reconcile: claims the mark (KEYS[1]) with ARGV[1] (its value,
# which says FULL) for ARGV[2] seconds, or adds FULL to the mark that is there. 1 when it claimed.
CLAIM_FULL = """
local value = redis.call('get', KEYS[1])
if not value then
  redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
if not string.find(value .. '\\n', '\\n*\\n', 1, true) then
  redis.call('set', KEYS[1], value .. '\\n*', 'KEEPTTL')
end
return 0
"""

# Undo a claim whose publish failed: only the mark of that claim (its ETA), raised or not.
RELEASE = """
local value = redis.call('get', KEYS[1])
if value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('del', KEYS[1])
end
return 0
"""


# Re-claim an overdue mark (KEYS[1]) whose ETA is still ARGV[1]: its ETA becomes ARGV[2] (now),
# "not before" and the changes stay, and it lives ARGV[3] seconds more. 1 when it did.
REFRESH = """
local value = redis.call('get', KEYS[1])
if not value or string.sub(value, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
redis.call('set', KEYS[1], ARGV[2] .. string.sub(value, #ARGV[1] + 1), 'EX', ARGV[3])
return 1
"""
