"""The man page's full rsync scrun.lua example, run locally on a podman-style bundle.

The example is kept verbatim from scrun(1); only `scratch_path` is pointed elsewhere
(see with_scratch_path). The integration tests run the same text under podman on the
Slurm cluster.
"""
# The example's text is verbatim, long lines and mixed tab indentation included.
# ruff: noqa: E101, E501

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pyscrun.hooks import lua
from tests.unit.test_lua_json import podman_style_config

# scrun(1), section SCRUN.LUA, "Full Container staging example using rsync".
MAN_PAGE_RSYNC_EXAMPLE = """\
local json = require 'json'
local open = io.open
local scratch_path = "/run/user/"

local function read_file(path)
	local file = open(path, "rb")
	if not file then return nil end
	local content = file:read "*all"
	file:close()
	return content
end

local function write_file(path, contents)
	local file = open(path, "wb")
	if not file then return nil end
	file:write(contents)
	file:close()
	return
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	slurm.log_debug(string.format("stage_in(%s, %s, %s, %s, %d, %d, %d)",
		       id, bundle, spool_dir, config_file, job_id, user_id, group_id))

	local status, output, user, rc
	local config = json.decode(read_file(config_file))
	local src_rootfs = config["root"]["path"]
	rc, user = slurm.allocator_command(string.format("id -un %d", user_id))
	user = string.gsub(user, "%s+", "")
	local root = scratch_path..math.floor(user_id).."/slurm/scrun/"
	local dst_bundle = root.."/"..id.."/"
	local dst_config = root.."/"..id.."/config.json"
	local dst_rootfs = root.."/"..id.."/rootfs/"

	if string.sub(src_rootfs, 1, 1) ~= "/"
	then
		-- always use absolute path
		src_rootfs = string.format("%s/%s", bundle, src_rootfs)
	end

	status, output = slurm.allocator_command("mkdir -p "..dst_rootfs)
	if (status ~= 0)
	then
		slurm.log_info(string.format("mkdir(%s) failed %u: %s",
			       dst_rootfs, status, output))
		return slurm.ERROR
	end

	status, output = slurm.allocator_command(string.format("/usr/bin/env rsync --exclude sys --exclude proc --numeric-ids --delete-after --ignore-errors --stats -a -- %s/ %s/", src_rootfs, dst_rootfs))
	if (status ~= 0)
	then
		-- rsync can fail due to permissions which may not matter
		slurm.log_info(string.format("WARNING: rsync failed: %s", output))
	end

	slurm.set_bundle_path(dst_bundle)
	slurm.set_root_path(dst_rootfs)

	config["root"]["path"] = dst_rootfs

	-- Always force user namespace support in container or runc will reject
	local process_user_id = 0
	local process_group_id = 0

	if ((config["process"] ~= nil) and (config["process"]["user"] ~= nil))
	then
		-- resolve out user in the container
		if (config["process"]["user"]["uid"] ~= nil)
		then
			process_user_id=config["process"]["user"]["uid"]
		else
			process_user_id=0
		end

		-- resolve out group in the container
		if (config["process"]["user"]["gid"] ~= nil)
		then
			process_group_id=config["process"]["user"]["gid"]
		else
			process_group_id=0
		end

		-- purge additionalGids as they are not supported in rootless
		if (config["process"]["user"]["additionalGids"] ~= nil)
		then
			config["process"]["user"]["additionalGids"] = nil
		end
	end

	if (config["linux"] ~= nil)
	then
		-- force user namespace to always be defined for rootless mode
		local found = false
		if (config["linux"]["namespaces"] == nil)
		then
			config["linux"]["namespaces"] = {}
		else
			for _, namespace in ipairs(config["linux"]["namespaces"]) do
				if (namespace["type"] == "user")
				then
					found=true
					break
				end
			end
		end
		if (found == false)
		then
			table.insert(config["linux"]["namespaces"], {type= "user"})
		end

		-- Provide default user map as root if one not provided
		if (true or config["linux"]["uidMappings"] == nil)
		then
			config["linux"]["uidMappings"] =
				{{containerID=process_user_id, hostID=math.floor(user_id), size=1}}
		end

		-- Provide default group map as root if one not provided
		-- mappings fail with build???
		if (true or config["linux"]["gidMappings"] == nil)
		then
			config["linux"]["gidMappings"] =
				{{containerID=process_group_id, hostID=math.floor(group_id), size=1}}
		end

		-- disable trying to use a specific cgroup
		config["linux"]["cgroupsPath"] = nil
	end

	if (config["mounts"] ~= nil)
	then
		-- Find and remove any user/group settings in mounts
		for _, mount in ipairs(config["mounts"]) do
			local opts = {}

			if (mount["options"] ~= nil)
			then
				for _, opt in ipairs(mount["options"]) do
					if ((string.sub(opt, 1, 4) ~= "gid=") and (string.sub(opt, 1, 4) ~= "uid="))
					then
						table.insert(opts, opt)
					end
				end
			end

			if (opts ~= nil and #opts > 0)
			then
				mount["options"] = opts
			else
				mount["options"] = nil
			end
		end

		-- Remove all bind mounts by copying files into rootfs
		local mounts = {}
		for i, mount in ipairs(config["mounts"]) do
			if ((mount["type"] ~= nil) and (mount["type"] == "bind") and (string.sub(mount["source"], 1, 4) ~= "/sys") and (string.sub(mount["source"], 1, 5) ~= "/proc"))
			then
				status, output = slurm.allocator_command(string.format("/usr/bin/env rsync --numeric-ids --ignore-errors --stats -a -- %s %s", mount["source"], dst_rootfs..mount["destination"]))
				if (status ~= 0)
				then
					-- rsync can fail due to permissions which may not matter
					slurm.log_info("rsync failed")
				end
			else
				table.insert(mounts, mount)
			end
		end
		config["mounts"] = mounts
	end

	-- Force version to one compatible with older runc/crun at risk of new features silently failing
	config["ociVersion"] = "1.0.0"

	-- Merge in Job environment into container -- this is optional!
	if (config["process"]["env"] == nil)
	then
		config["process"]["env"] = {}
	end
	for _, env in ipairs(job_env) do
		table.insert(config["process"]["env"], env)
	end

	-- Remove all prestart hooks to squash any networking attempts
	if ((config["hooks"] ~= nil) and (config["hooks"]["prestart"] ~= nil))
	then
		config["hooks"]["prestart"] = nil
	end

	-- Remove all rlimits
	if ((config["process"] ~= nil) and (config["process"]["rlimits"] ~= nil))
	then
		config["process"]["rlimits"] = nil
	end

	write_file(dst_config, json.encode(config))
	slurm.log_info("created: "..dst_config)

	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, jobid, user_id, group_id)
	if (root_path == nil)
	then
		root_path = ""
	end

	slurm.log_debug(string.format("stage_out(%s, %s, %s, %s, %s, %s, %s, %d, %d, %d)",
		       id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, jobid, user_id, group_id))

	if (bundle == orig_bundle)
	then
		slurm.log_info(string.format("skipping stage_out as bundle=orig_bundle=%s", bundle))
		return slurm.SUCCESS
	end

	status, output = slurm.allocator_command(string.format("/usr/bin/env rsync --numeric-ids --delete-after --ignore-errors --stats -a -- %s/ %s/", root_path, orig_root_path))
	if (status ~= 0)
	then
		-- rsync can fail due to permissions which may not matter
		slurm.log_info("rsync failed")
	else
		-- cleanup temporary after they have been synced backed to source
		slurm.allocator_command(string.format("/usr/bin/rm --preserve-root=all --one-file-system -dr -- %s", bundle))
	end

	return slurm.SUCCESS
end

slurm.log_info("initialized scrun.lua")

return slurm.SUCCESS
"""


def with_scratch_path(scratch: Path) -> str:
    """The example with its one site-specific line changed: where copies are staged."""
    original = 'local scratch_path = "/run/user/"\n'
    assert MAN_PAGE_RSYNC_EXAMPLE.count(original) == 1
    return MAN_PAGE_RSYNC_EXAMPLE.replace(original, f'local scratch_path = "{scratch}/"\n')


def _no_remote(script: str) -> tuple[int, str]:
    raise AssertionError(f"the example runs nothing remotely, yet ran {script!r}")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A podman-like bundle: config.json, a rootfs and a bind-mounted file beside it."""
    if shutil.which("rsync") is None:
        pytest.fail("rsync is missing: install it with `make setup` (apt package rsync)")
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "etc").mkdir(parents=True)
    (bundle / "rootfs" / "proc").mkdir()
    (bundle / "rootfs" / "etc" / "os-release").write_text("ID=test\n")
    (tmp_path / "hosts").write_text("127.0.0.1 staged\n")
    config = podman_style_config(tmp_path)
    config["mounts"].append({"destination": "/etc/hosts", "type": "bind",
                             "source": str(tmp_path / "hosts"),
                             "options": ["rbind", "ro", "uid=0"]})
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def test_stage_in_and_out_as_the_man_page_says(tmp_path: Path, bundle: Path) -> None:
    scratch = tmp_path / "scratch"
    script = tmp_path / "etc" / "scrun.lua"
    script.parent.mkdir()
    script.write_text(with_scratch_path(scratch))
    rootfs = str(bundle / "rootfs")
    hooks = lua.load(script, _no_remote, str(bundle), rootfs)
    assert hooks is not None
    uid, gid = os.getuid(), os.getgid()
    staged = hooks.stage_in("cid", str(bundle), str(tmp_path / "spool"),
                            str(bundle / "config.json"), 42, uid, gid,
                            ["SLURM_JOB_ID=42", "SCRUN_ID=cid"])
    stage_dir = f"{scratch}/{uid}/slurm/scrun//cid/"
    assert staged == lua.StageResult(stage_dir, stage_dir + "rootfs/")

    config = json.loads(Path(stage_dir, "config.json").read_text())
    assert config["root"]["path"] == stage_dir + "rootfs/"
    assert config["ociVersion"] == "1.0.0"
    assert {"type": "user"} in config["linux"]["namespaces"]
    assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": uid, "size": 1}]
    assert config["linux"]["gidMappings"] == [{"containerID": 0, "hostID": gid, "size": 1}]
    assert "cgroupsPath" not in config["linux"]
    assert all(m["type"] != "bind" for m in config["mounts"])
    assert not any(o.startswith(("uid=", "gid=")) for m in config["mounts"]
                   for o in m.get("options", []))
    assert config["process"]["env"][-2:] == ["SLURM_JOB_ID=42", "SCRUN_ID=cid"]
    assert "rlimits" not in config["process"]
    assert "prestart" not in config["hooks"]
    assert "additionalGids" not in config["process"]["user"]
    # What the script left alone is as podman wrote it, empty objects included.
    assert config["annotations"] == {}
    assert config["linux"]["sysctl"] == {}
    assert config["hooks"]["poststop"] == []
    assert Path(stage_dir, "rootfs/etc/os-release").read_text() == "ID=test\n"
    assert Path(stage_dir, "rootfs/etc/hosts").read_text() == "127.0.0.1 staged\n"
    assert not Path(stage_dir, "rootfs/proc").exists()

    Path(stage_dir, "rootfs/written-by-container").write_text("out\n")
    hooks.stage_out("cid", staged.bundle, str(bundle), staged.root_path, rootfs,
                    str(tmp_path / "spool"), str(bundle / "config.json"), 42, uid, gid)
    assert (bundle / "rootfs" / "written-by-container").read_text() == "out\n"
    assert not Path(stage_dir).exists()


def test_stage_out_skips_an_unmoved_bundle(tmp_path: Path, bundle: Path) -> None:
    script = tmp_path / "scrun.lua"
    script.write_text(with_scratch_path(tmp_path / "scratch"))
    hooks = lua.load(script, _no_remote, str(bundle), str(bundle / "rootfs"))
    assert hooks is not None
    hooks.stage_out("cid", str(bundle), str(bundle), str(bundle / "rootfs"),
                    str(bundle / "rootfs"), "/spool", str(bundle / "config.json"), 1, 0, 0)
    assert (bundle / "rootfs" / "etc" / "os-release").exists()
