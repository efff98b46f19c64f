"""scrun.lua: the site's stage-in and stage-out hooks, run in an embedded Lua."""
