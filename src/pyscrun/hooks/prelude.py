"""The Lua side of scrun.lua's host: the `slurm` table, `require 'json'` and the caller.

Run once per Lua state with (script name, Python callbacks, json.null, the constants
of constants.py, CLUSTER_NAME or nil, how many instructions between two looks for a
signal). It mirrors Slurm's src/lua/slurm_lua.c and
src/scrun/lua.c where scripts can tell:

- Slurm's C functions read their argument from the top of the Lua stack, the last
  one passed; so do these (`last`).
- slurm.log takes (level, msg) in Slurm's code but (msg, level) in the man page; a
  string followed by a number is taken in the man page's order, anything else as
  Slurm does. Levels: 0 info, 1 verbose, 2 debug, 3 debug2, 4 debug3, above debug4.
- slurm.log_info and friends format their arguments with string.format, as Slurm's.
- set_bundle_path and set_root_path return the original path.
- `require 'json'` gets pyscrun's json only if the site has none on its paths.

Returns `call(fn, ...)` -> line, ok, value, number: it runs fn under xpcall with a
handler that gives every error the script's line (a Python exception or error(x, 0)
has none), and a return hook records the line of fn's `return`, so that a failure
result can be reported where it was returned. The same hook, every so many
instructions, has Python look for a signal and raise it as an error (as the lua
interpreter's own hook does on Ctrl-C): a script that loops without a command is
interrupted too.
"""

SOURCE = r"""
local name, py, null, constants, cluster_name, check_every = ...
local source = "@" .. name
local prefix = name .. ":"

local function last(...)
  local n = select("#", ...)
  if n == 0 then return nil end
  return (select(n, ...))
end

-- A string argument; numbers are turned into strings as lua_tostring does. Errors
-- here and below carry no position: the handler gives them the script's line.
local function text(what, value)
  if type(value) == "number" then return tostring(value) end
  if type(value) ~= "string" then
    error(string.format("%s: expected a string, got %s", what, type(value)), 0)
  end
  return value
end

-- A Python callback whose exceptions become Lua errors at the script's line.
local function guarded(what, fn)
  return function(...)
    local result = table.pack(pcall(fn, ...))
    if not result[1] then error(what .. ": " .. tostring(result[2]), 0) end
    return table.unpack(result, 2, result.n)
  end
end

local slurm = constants
slurm.CLUSTER_NAME = cluster_name

function slurm.log(...)
  local n = select("#", ...)
  local a, b = ...
  local level, msg
  if n == 2 and type(a) == "string" and type(b) == "number" then
    msg, level = a, b
  else
    msg = last(...)
    level = n >= 2 and tonumber((select(n - 1, ...))) or 0
  end
  py.log(level, tostring(msg))
end

function slurm.error(...)
  py.log(nil, tostring(last(...)))
end

local function formatter(level)
  return function(...) slurm.log(level, string.format(...)) end
end
function slurm.log_error(...) slurm.error(string.format(...)) end
slurm.log_info = formatter(0)
slurm.log_verbose = formatter(1)
slurm.log_debug = formatter(2)
slurm.log_debug2 = formatter(3)
slurm.log_debug3 = formatter(4)
slurm.log_debug4 = formatter(5)

local set_bundle = guarded("slurm.set_bundle_path", py.set_bundle)
function slurm.set_bundle_path(...)
  return set_bundle(text("slurm.set_bundle_path", last(...)))
end
local set_root = guarded("slurm.set_root_path", py.set_root)
function slurm.set_root_path(...)
  return set_root(text("slurm.set_root_path", last(...)))
end
local remote = guarded("slurm.remote_command", py.remote_command)
function slurm.remote_command(...)
  return remote(text("slurm.remote_command", last(...)))
end
local allocator = guarded("slurm.allocator_command", py.allocator_command)
function slurm.allocator_command(...)
  return allocator(text("slurm.allocator_command", last(...)))
end

function slurm.time_str2mins(...)
  local s = last(...)
  if type(s) == "number" then s = tostring(s) elseif type(s) ~= "string" then s = nil end
  return py.time_str2mins(s)
end

local encode = guarded("json.encode", py.encode)
local decode = guarded("json.decode", py.decode)
function slurm.to_json(...) return encode(last(...)) end
function slurm.from_json(...) return decode(last(...)) end

local json = {
  null = null,
  encode = function(value) return encode(value) end,
  decode = function(s) return decode(s) end,
}
-- Slurm has no json module of its own: a script's `require 'json'` gets the site's,
-- found on package.path or package.cpath. This one comes only where there is none.
table.insert(package.searchers, function(module)
  if module == "json" then return function() return json end, ":pyscrun:" end
end)

_G.slurm = slurm
-- Scripts get Lua, not Python; and os.exit would end the anchor with the job held.
_G.python = nil
package.loaded.python = nil
os.exit = function() error("os.exit is not allowed in " .. name, 0) end

local function handler(err)
  local msg = tostring(err)
  if msg:sub(1, #prefix) == prefix and msg:find("^%d+:", #prefix + 1) then return msg end
  for level = 2, 100 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.source == source and info.currentline > 0 then
      return string.format("%s:%d: %s", name, info.currentline, msg)
    end
  end
  return msg
end

return function(fn, ...)
  local line = -1
  debug.sethook(function(event)
    if event == "count" then return py.check_interrupt() end
    local info = debug.getinfo(2, "fl")
    if info and info.func == fn then line = info.currentline end
  end, "r", check_every)
  local result = table.pack(xpcall(fn, handler, ...))
  debug.sethook()
  local ok, value = result[1], result[2]
  if not ok then return line, false, tostring(value), nil end
  local number = nil
  if type(value) == "number" or type(value) == "string" then number = tonumber(value) end
  return line, true, value, number
end
"""
