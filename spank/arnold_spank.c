/*
 * SPANK plugin: `--arnold-rankfile=PATH|auto` gives every task its rank from the
 * arnold-rankorder v1 file that arnold-sbatch wrote for the job (docs/rankorder.md).
 *
 * In slurm_spank_task_init (remote context, which runs as the job's user just before exec)
 * it looks up the task's (node name, local task id) and exports RANK, LOCAL_RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, ARNOLD_TP_RANK, ARNOLD_PP_RANK, ARNOLD_DP_RANK and
 * ARNOLD_PLACEMENT_ID. A malformed or unreadable file fails the task with
 * "arnold: <file>: line N: <problem>". The file is opened with the user's own rights, so the
 * plugin never reads anything the user could not. It is trusted only when it and its directory
 * belong to the job's user (or root) and nobody else may change them (the directory may be
 * others-writable only when sticky), and when its nodes are exactly the job's allocation
 * (SLURM_JOB_NODELIST): a file made for other nodes, or one another user could have written,
 * fails the task.
 *
 * With `rankdir=DIR` in plugstack.conf, `auto` first looks for DIR/<job id>.rankorder: the
 * file the admin side writes when it places a job after submission (late binding, repairs).
 * It is trusted when DIR and the file belong to root or to DIR's owner (the admin account)
 * and nobody else may write them; when there is none, $ARNOLD_RANKFILE is read as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "rankorder.h"

SPANK_PLUGIN(arnold_rankfile, 1);

#define PATH_MAX_LEN 4096

static char rankfile[PATH_MAX_LEN + 1];
static int rankfile_set;
static char rankdir[PATH_MAX_LEN + 1];

static int option_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	if (!optarg || !*optarg || strlen(optarg) > PATH_MAX_LEN) {
		slurm_error("arnold: --arnold-rankfile: expected a path or \"auto\"");
		return -1;
	}
	if (rankfile_set && strcmp(rankfile, optarg) != 0) {
		slurm_error("arnold: --arnold-rankfile given twice with different values");
		return -1;
	}
	memcpy(rankfile, optarg, strlen(optarg) + 1);
	rankfile_set = 1;
	return 0;
}

static struct spank_option rankfile_option = {
	"arnold-rankfile", "PATH|auto",
	"Set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT and ARNOLD_*_RANK from an "
	"arnold-rankorder v1 file (auto: $ARNOLD_RANKFILE)",
	1, 0, option_cb
};

/* Whether a file or directory of `st` could have been written by someone but `uid` or root. */
static const char *foreign_writer(const struct stat *st, uid_t uid, int is_dir)
{
	if (st->st_uid != uid && st->st_uid != 0)
		return "belongs to another user";
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(is_dir && (st->st_mode & S_ISVTX)))
		return "is writable by other users";
	return NULL;
}

/*
 * In srun (local context), before srun reads its environment: a job arnold-sbatch placed
 * carries SLURM_HOSTFILE=$ARNOLD_HOSTFILE, one node per rank, so that SLURM_PROCID follows
 * RANK. When the job runs on other nodes (requeued after a failure, moved) that file names
 * nodes it does not have and srun would refuse the step; the admin side then has written
 * DIR/<job id>.hosts for the nodes it does have, which srun is pointed at instead. Trusted as
 * the rank file is: DIR and the file belong to root or DIR's owner, nobody else may write them.
 */
static void follow_admin_hostfile(void)
{
	const char *hostfile = getenv("SLURM_HOSTFILE");
	const char *ours = getenv("ARNOLD_HOSTFILE");
	const char *job = getenv("SLURM_JOB_ID");
	char path[PATH_MAX_LEN + 1];
	struct stat dir, st;
	size_t digits;
	int n;

	if (!*rankdir || !hostfile || !ours || strcmp(hostfile, ours) != 0 || !job)
		return;
	digits = strspn(job, "0123456789");
	if (digits == 0 || digits > 10 || job[digits] != '\0')
		return;
	if (stat(rankdir, &dir) != 0 || !S_ISDIR(dir.st_mode) ||
	    foreign_writer(&dir, dir.st_uid, 1))
		return;
	n = snprintf(path, sizeof(path), "%s/%s.hosts", rankdir, job);
	if (n < 0 || (size_t)n >= sizeof(path))
		return;
	if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || foreign_writer(&st, dir.st_uid, 0))
		return;
	setenv("SLURM_HOSTFILE", path, 1);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (strncmp(av[i], "rankdir=", 8) == 0 && av[i][8] == '/' &&
		    strlen(av[i] + 8) < PATH_MAX_LEN - 32) {
			memcpy(rankdir, av[i] + 8, strlen(av[i] + 8) + 1);
			continue;
		}
		slurm_error("arnold: unknown plugin argument \"%.64s\" in plugstack.conf "
			    "(known: rankdir=/absolute/dir)", av[i]);
		return -1;
	}
	if (spank_option_register(sp, &rankfile_option) != ESPANK_SUCCESS) {
		slurm_error("arnold: cannot register --arnold-rankfile");
		return -1;
	}
	if (spank_context() == S_CTX_LOCAL)
		follow_admin_hostfile();
	return 0;
}

static int check_dir(const char *path, uid_t uid, char *why, size_t whylen);

/* The admin side's file for this job, if rankdir is set and it exists: 1 and its path in
 * `out`; 0 when there is none; -1 (with `why`) when DIR itself cannot be trusted. */
static int job_rankfile(spank_t sp, char *out, size_t outlen, uid_t *owner, char *why,
			size_t whylen)
{
	struct stat st;
	uint32_t job_id = 0;
	const char *problem;
	int n;

	if (!*rankdir)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		snprintf(why, whylen, "cannot tell the job id");
		return -1;
	}
	if (stat(rankdir, &st) != 0) {
		if (errno == ENOENT)
			return 0; /* nothing placed by the admin side yet */
		snprintf(why, whylen, "rankdir %.100s: %s", rankdir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "rankdir %.100s is not a directory", rankdir);
		return -1;
	}
	problem = foreign_writer(&st, st.st_uid, 1);
	if (problem) {
		snprintf(why, whylen, "rankdir %.100s %s; not trusted", rankdir, problem);
		return -1;
	}
	n = snprintf(out, outlen, "%s/%u.rankorder", rankdir, job_id);
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(why, whylen, "rankdir path too long");
		return -1;
	}
	if (access(out, F_OK) != 0)
		return 0;
	*owner = st.st_uid;
	return 1;
}

static int check_dir(const char *path, uid_t uid, char *why, size_t whylen)
{
	char dir[PATH_MAX_LEN + 1];
	const char *slash = strrchr(path, '/');
	const char *problem;
	struct stat st;
	size_t n;

	if (!slash) {
		dir[0] = '.';
		dir[1] = '\0';
	} else {
		n = slash == path ? 1 : (size_t)(slash - path);
		memcpy(dir, path, n);
		dir[n] = '\0';
	}
	if (stat(dir, &st) != 0) {
		snprintf(why, whylen, "cannot stat its directory: %s", strerror(errno));
		return -1;
	}
	problem = foreign_writer(&st, uid, 1);
	if (problem) {
		snprintf(why, whylen, "its directory %.100s %s; not trusted", dir, problem);
		return -1;
	}
	return 0;
}

static char *read_file(const char *path, uid_t uid, size_t *len, char *why, size_t whylen)
{
	struct stat st;
	const char *problem;
	char *buf;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0) {
		snprintf(why, whylen, "cannot open: %s", strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "not a regular file");
		close(fd);
		return NULL;
	}
	problem = foreign_writer(&st, uid, 0);
	if (problem) {
		snprintf(why, whylen, "%s; not trusted (it must be yours and writable only by you)",
			 problem);
		close(fd);
		return NULL;
	}
	if (check_dir(path, uid, why, whylen) != 0) {
		close(fd);
		return NULL;
	}
	if ((size_t)st.st_size > ARNOLD_MAX_FILE) {
		snprintf(why, whylen, "larger than %zu bytes", (size_t)ARNOLD_MAX_FILE);
		close(fd);
		return NULL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		snprintf(why, whylen, "out of memory");
		close(fd);
		return NULL;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got != (size_t)st.st_size) {
		snprintf(why, whylen, "short read");
		free(buf);
		return NULL;
	}
	*len = got;
	return buf;
}

static int set(spank_t sp, const char *name, const char *value)
{
	if (spank_setenv(sp, name, value, 1) != ESPANK_SUCCESS) {
		slurm_error("arnold: cannot set %s", name);
		return -1;
	}
	return 0;
}

static int set_u32(spank_t sp, const char *name, uint32_t value)
{
	char text[16];

	snprintf(text, sizeof(text), "%u", value);
	return set(sp, name, text);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	char path[PATH_MAX_LEN + 1];
	char node[ARNOLD_MAX_NAME + 2];
	static char nodelist[ARNOLD_MAX_NODELIST + 1];
	uid_t uid, owner;
	int found;
	char why[200];
	struct arnold_header hdr;
	struct arnold_entry e;
	struct arnold_error err;
	size_t len = 0;
	char *buf;
	int task_id = -1, rc;

	(void)ac;
	(void)av;
	if (!rankfile_set || !spank_remote(sp))
		return 0;
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		slurm_error("arnold: cannot tell the job's user");
		return -1;
	}
	owner = uid;
	found = strcmp(rankfile, "auto") == 0 ?
		job_rankfile(sp, path, sizeof(path), &owner, why, sizeof(why)) : 0;
	if (found < 0) {
		slurm_error("arnold: %s", why);
		return -1;
	}
	if (found) {
		/* placed by the admin side: trusted as its owner's */
	} else if (strcmp(rankfile, "auto") == 0) {
		if (spank_getenv(sp, "ARNOLD_RANKFILE", path, sizeof(path)) != ESPANK_SUCCESS ||
		    !*path) {
			slurm_error("arnold: --arnold-rankfile=auto but ARNOLD_RANKFILE is not set "
				    "in the job's environment");
			return -1;
		}
	} else {
		memcpy(path, rankfile, strlen(rankfile) + 1);
	}
	if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof(node)) != ESPANK_SUCCESS) {
		slurm_error("arnold: %s: cannot tell this node's name (SLURMD_NODENAME)", path);
		return -1;
	}
	if (spank_get_item(sp, S_TASK_ID, &task_id) != ESPANK_SUCCESS || task_id < 0) {
		slurm_error("arnold: %s: cannot tell the local task id", path);
		return -1;
	}
	if (spank_getenv(sp, "SLURM_JOB_NODELIST", nodelist, sizeof(nodelist)) != ESPANK_SUCCESS ||
	    !*nodelist) {
		slurm_error("arnold: %s: cannot tell the job's nodes (SLURM_JOB_NODELIST)", path);
		return -1;
	}
	buf = read_file(path, owner, &len, why, sizeof(why));
	if (!buf) {
		slurm_error("arnold: %s: %s", path, why);
		return -1;
	}
	rc = arnold_rankorder_lookup(buf, len, node, (uint32_t)task_id, &hdr, &e, &err);
	if (rc == 0)
		rc = arnold_rankorder_nodes_match(buf, len, nodelist, &err);
	free(buf);
	if (rc != 0) {
		if (err.line)
			slurm_error("arnold: %s: line %lu: %s", path, err.line, err.message);
		else
			slurm_error("arnold: %s: %s", path, err.message);
		return -1;
	}
	if (set_u32(sp, "RANK", e.rank) || set_u32(sp, "LOCAL_RANK", e.local_rank) ||
	    set_u32(sp, "WORLD_SIZE", hdr.world_size) || set(sp, "MASTER_ADDR", hdr.master_addr) ||
	    set_u32(sp, "MASTER_PORT", hdr.master_port) || set_u32(sp, "ARNOLD_TP_RANK", e.tp) ||
	    set_u32(sp, "ARNOLD_PP_RANK", e.pp) || set_u32(sp, "ARNOLD_DP_RANK", e.dp) ||
	    set_u32(sp, "ARNOLD_CP_RANK", e.cp) || set_u32(sp, "ARNOLD_EP_RANK", e.dp % hdr.ep) ||
	    set(sp, "ARNOLD_PLACEMENT_ID", hdr.placement_id))
		return -1;
	return 0;
}
