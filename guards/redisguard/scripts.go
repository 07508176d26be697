package redisguard

import "github.com/redis/go-redis/v9"

// markValid is the Lua test of a stored mark (mt, mr): a canonical decimal
// token in 1..MaxInt64 and a run identity as fence.ValidateRun accepts.
// known, when not nil, is a run identity the guard validated before
// sending it (the claim's): a stored run equal to it is valid without
// scanning its characters, which is most of the test's cost when the same
// run writes again. Tokens are compared as strings (length first), never
// as Lua numbers, which are doubles and would round tokens above 2^53.
const markValid = `
local function badmark(mt, mr, known)
  if not mt or #mt > 19 or not string.match(mt, '^[1-9][0-9]*$') then return true end
  if #mt == 19 and mt > '9223372036854775807' then return true end
  if #mr > 64 or (mr ~= known and string.match(mr, '[^0-9A-Za-z%._:%-]')) then return true end
  return false
end
local function cmp(a, b)
  if #a ~= #b then if #a < #b then return -1 else return 1 end end
  if a == b then return 0 elseif a < b then return -1 else return 1 end
end
`

// writeScript is the fenced write: KEYS[1] the value, KEYS[2] the mark (a
// hash: t token, r run, w write id), KEYS[3] the resource's write-id record
// (a sorted set: member the id of a write applied, or "c" and the id of a
// write settled as not applied; score the server time in ms until which
// the member is kept). ARGV: token, run (checked with fence.ValidateRun by
// the caller), write id, op ("p" put, "d" delete, "m" the mark alone),
// value, TTL in ms ("0": none), the request's deadline (Unix ms, server
// time: a copy arriving later is refused) and the window in ms (records
// are kept that long after the deadline). Reply: {code, mark token or
// server time, mark run or reason} with code "ok", "dup" (this write id
// was applied before: not applied again), "cancelled" (settled as not
// applied), "expired" (arrived after its deadline; second element the
// server time), "clock" (deadline further than two windows ahead of the
// server's clock), "stale", "reused" or "bad" (the mark, or the value
// key's type, is not this guard's; the third element says why). Nothing is
// written unless the code is "ok".
var writeScript = redis.NewScript(markValid + `
local id = ARGV[3]
local seen = redis.call('ZMSCORE', KEYS[3], id, 'c' .. id)
if seen[1] then return {'dup', '', ''} end
if seen[2] then return {'cancelled', '', ''} end
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local dl, win = tonumber(ARGV[7]), tonumber(ARGV[8])
if now > dl then return {'expired', tostring(now), ''} end
if dl - now > 2 * win then return {'clock', tostring(now), ''} end
local m = redis.pcall('HMGET', KEYS[2], 't', 'r', 'w')
if m['err'] then return {'bad', '', 'mark key is not a hash'} end
local mt, mr, mw = m[1], m[2] or '', m[3] or ''
if mt or m[2] or m[3] then
  if badmark(mt, mr, ARGV[2]) then return {'bad', mt or '', 'malformed mark'} end
else
  mt = nil
end
local tok, run = ARGV[1], ARGV[2]
if mw == id then return {'dup', mt, mr} end
if mt then
  local c = cmp(tok, mt)
  if c < 0 then return {'stale', mt, mr} end
  if c == 0 and run ~= '' and mr ~= '' and run ~= mr then return {'reused', mt, mr} end
  if c == 0 and run == '' then run = mr end
end
local vt = redis.call('TYPE', KEYS[1])['ok']
if vt ~= 'none' and vt ~= 'string' then return {'bad', '', 'value key holds a ' .. vt} end
if ARGV[4] == 'd' then
  redis.call('DEL', KEYS[1])
elseif ARGV[4] == 'm' then
  -- the mark alone
elseif ARGV[6] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[6])
else
  redis.call('SET', KEYS[1], ARGV[5])
end
redis.call('HSET', KEYS[2], 't', tok, 'r', run, 'w', id)
redis.call('ZADD', KEYS[3], dl + win, id)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
redis.call('PEXPIRE', KEYS[3], 3 * win)
return {'ok', tok, run}
`)

// readScript reads value and mark together: KEYS[1] the value, KEYS[2] the
// mark. Reply: {code, value, token, run, write id} with code "ok", "none"
// (no mark), "novalue" (a mark but no value) or "bad" (value or mark
// unreadable; the second element says why).
var readScript = redis.NewScript(markValid + `
local typ = redis.call('TYPE', KEYS[2])['ok']
if typ == 'none' then return {'none', '', '', '', ''} end
if typ ~= 'hash' then return {'bad', 'mark key holds a ' .. typ, '', '', ''} end
local m = redis.call('HMGET', KEYS[2], 't', 'r', 'w')
local mt, mr, mw = m[1], m[2] or '', m[3] or ''
if badmark(mt, mr) then return {'bad', 'malformed mark', mt or '', '', ''} end
local vt = redis.call('TYPE', KEYS[1])['ok']
if vt == 'none' then return {'novalue', '', mt, mr, mw} end
if vt ~= 'string' then return {'bad', 'value key holds a ' .. vt, mt, mr, mw} end
return {'ok', redis.call('GET', KEYS[1]), mt, mr, mw}
`)

// settleScript settles a write whose reply was lost: KEYS[1] the mark,
// KEYS[2] the write-id record; ARGV: write id, the write's deadline (Unix
// ms, server time), the window in ms. If the mark or the record says the
// write id was applied: {"applied", token, run, ""}. Otherwise, while the
// write's copies can still arrive, "c" and the id are recorded until the
// record's end, so that a copy arriving later is refused ("cancelled"),
// and the reply is {"cancelled", token, run, complete} with the current
// mark ("" when none); complete is "1" when the server's clock is within
// the record's span (the record then holds every copy of this write that
// was applied: none was), "" when it may have been pruned. An unreadable
// mark: {"bad", ...}.
var settleScript = redis.NewScript(markValid + `
local typ = redis.call('TYPE', KEYS[1])['ok']
local mt, mr, mw = '', '', ''
if typ == 'hash' then
  local m = redis.call('HMGET', KEYS[1], 't', 'r', 'w')
  if badmark(m[1], m[2] or '') then return {'bad', m[1] or '', 'malformed mark', ''} end
  mt, mr, mw = m[1], m[2] or '', m[3] or ''
elseif typ ~= 'none' then
  return {'bad', '', 'mark key holds a ' .. typ, ''}
end
local id = ARGV[1]
if mw == id then return {'applied', mt, mr, ''} end
local seen = redis.call('ZMSCORE', KEYS[2], id, 'c' .. id)
if seen[1] then return {'applied', mt, mr, ''} end
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local dl, win = tonumber(ARGV[2]), tonumber(ARGV[3])
if not seen[2] and now <= dl then
  redis.call('ZADD', KEYS[2], dl + win, 'c' .. id)
  local need = dl + win - now
  local pt = redis.call('PTTL', KEYS[2])
  if pt < need then redis.call('PEXPIRE', KEYS[2], need) end
end
local complete = ''
if now <= dl + win then complete = '1' end
return {'cancelled', mt, mr, complete}
`)
