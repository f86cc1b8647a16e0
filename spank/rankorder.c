/* arnold-rankorder v1 parser: see rankorder.h and docs/rankorder.md. */
#include "rankorder.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(struct arnold_error *err, unsigned long line, const char *fmt, ...)
{
	va_list ap;

	err->line = line;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

static int valid_name(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > ARNOLD_MAX_NAME)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

/* Split a line into at most `max` space-separated tokens; returns the count or -1 if more. */
static int split(char *line, char **tok, int max)
{
	int n = 0;
	char *p = line;

	while (*p) {
		while (*p == ' ')
			*p++ = '\0';
		if (!*p)
			break;
		if (n == max)
			return -1;
		tok[n++] = p;
		while (*p && *p != ' ')
			p++;
	}
	return n;
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long v;

	if (!*s || strlen(s) > 10)
		return -1;
	for (const char *q = s; *q; q++)
		if (*q < '0' || *q > '9')
			return -1;
	if (s[0] == '0' && s[1])
		return -1; /* no leading zeros: one spelling per number */
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* Headers before H_REQUIRED must each appear once; cp and ep may (1 when absent). */
enum { H_WORLD, H_ADDR, H_PORT, H_ID, H_TP, H_PP, H_DP, H_ORDER, H_REQUIRED,
       H_CP = H_REQUIRED, H_EP, H_COUNT };
static const char *const header_keys[H_COUNT] = {
	"world_size", "master_addr", "master_port", "placement_id", "tp", "pp", "dp", "order",
	"cp", "ep"
};

int arnold_rankorder_lookup(const char *buf, size_t len, const char *node,
			    uint32_t local_rank, struct arnold_header *hdr,
			    struct arnold_entry *out, struct arnold_error *err)
{
	char line[ARNOLD_MAX_LINE + 1];
	char *tok[8];
	int seen[H_COUNT] = {0};
	int in_ranks = 0, found = 0;
	unsigned long lineno = 0;
	uint32_t next_rank = 0;
	size_t pos = 0;

	memset(hdr, 0, sizeof(*hdr));
	memset(out, 0, sizeof(*out));
	hdr->cp = hdr->ep = 1;
	err->line = 0;
	err->message[0] = '\0';
	if (len > ARNOLD_MAX_FILE)
		return fail(err, 0, "file larger than %zu bytes", (size_t)ARNOLD_MAX_FILE);
	if (!node || !valid_name(node, strlen(node)))
		return fail(err, 0, "this node's name is not a valid node name");

	while (pos < len) {
		size_t n = 0;
		int ntok;

		lineno++;
		while (pos + n < len && buf[pos + n] != '\n') {
			if (n == ARNOLD_MAX_LINE)
				return fail(err, lineno, "line longer than %d bytes",
					    ARNOLD_MAX_LINE);
			n++;
		}
		if (pos + n == len)
			return fail(err, lineno, "last line does not end with a newline");
		if (memchr(buf + pos, '\0', n) || memchr(buf + pos, '\r', n) ||
		    memchr(buf + pos, '\t', n))
			return fail(err, lineno, "control character in line");
		memcpy(line, buf + pos, n);
		line[n] = '\0';
		pos += n + 1;

		if (lineno == 1) {
			if (strcmp(line, "arnold-rankorder v1") != 0)
				return fail(err, 1, "expected \"arnold-rankorder v1\"");
			continue;
		}
		if (line[0] == '#')
			continue;
		ntok = split(line, tok, 7);
		if (ntok < 0)
			return fail(err, lineno, "too many fields");
		if (ntok == 0)
			return fail(err, lineno, "empty line");

		if (!in_ranks) {
			int k;

			if (ntok == 1 && strcmp(tok[0], "ranks") == 0) {
				for (k = 0; k < H_REQUIRED; k++)
					if (!seen[k])
						return fail(err, lineno, "header %s missing before ranks",
							    header_keys[k]);
				/* Each factor is at most 2^20, so four of them could overflow 64
				 * bits: stop as soon as a partial product exceeds the rank limit. */
				if ((uint64_t)hdr->tp * hdr->cp > ARNOLD_MAX_RANKS ||
				    (uint64_t)hdr->tp * hdr->cp * hdr->pp > ARNOLD_MAX_RANKS ||
				    (uint64_t)hdr->tp * hdr->cp * hdr->pp * hdr->dp != hdr->world_size)
					return fail(err, lineno, "world_size is not tp x cp x pp x dp");
				if (hdr->dp % hdr->ep)
					return fail(err, lineno, "ep does not divide dp");
				in_ranks = 1;
				continue;
			}
			if (ntok != 2)
				return fail(err, lineno, "expected \"key value\"");
			for (k = 0; k < H_COUNT; k++)
				if (strcmp(tok[0], header_keys[k]) == 0)
					break;
			if (k == H_COUNT)
				return fail(err, lineno, "unknown header %.40s", tok[0]);
			if (seen[k])
				return fail(err, lineno, "header %s given twice", header_keys[k]);
			seen[k] = 1;
			switch (k) {
			case H_WORLD:
				if (parse_u32(tok[1], ARNOLD_MAX_RANKS, &hdr->world_size) ||
				    hdr->world_size == 0)
					return fail(err, lineno, "bad world_size");
				break;
			case H_PORT:
				if (parse_u32(tok[1], 65535, &hdr->master_port) ||
				    hdr->master_port == 0)
					return fail(err, lineno, "bad master_port");
				break;
			case H_TP:
			case H_PP:
			case H_DP:
			case H_CP:
			case H_EP: {
				uint32_t *dst = k == H_TP ? &hdr->tp : k == H_PP ? &hdr->pp :
						k == H_DP ? &hdr->dp : k == H_CP ? &hdr->cp : &hdr->ep;
				if (parse_u32(tok[1], ARNOLD_MAX_GROUP, dst) || *dst == 0)
					return fail(err, lineno, "bad %s", header_keys[k]);
				break;
			}
			default: {
				char *dst = k == H_ADDR ? hdr->master_addr :
					    k == H_ID ? hdr->placement_id : hdr->order;
				if (!valid_name(tok[1], strlen(tok[1])))
					return fail(err, lineno, "bad %s", header_keys[k]);
				memcpy(dst, tok[1], strlen(tok[1]) + 1);
			}
			}
			continue;
		}

		/* rank node local_rank tp pp dp [cp] */
		{
			struct arnold_entry e;

			if (hdr->cp > 1 && ntok != 7)
				return fail(err, lineno,
					    "expected \"rank node local_rank tp pp dp cp\"");
			if (hdr->cp == 1 && ntok != 6)
				return fail(err, lineno, "expected \"rank node local_rank tp pp dp\"");
			e.cp = 0;
			if (next_rank >= hdr->world_size)
				return fail(err, lineno, "more ranks than world_size %u",
					    hdr->world_size);
			if (parse_u32(tok[0], ARNOLD_MAX_RANKS, &e.rank) || e.rank != next_rank)
				return fail(err, lineno, "expected rank %u", next_rank);
			if (!valid_name(tok[1], strlen(tok[1])))
				return fail(err, lineno, "bad node name");
			if (parse_u32(tok[2], ARNOLD_MAX_RANKS, &e.local_rank))
				return fail(err, lineno, "bad local_rank");
			if (parse_u32(tok[3], hdr->tp - 1, &e.tp))
				return fail(err, lineno, "tp rank outside 0..%u", hdr->tp - 1);
			if (parse_u32(tok[4], hdr->pp - 1, &e.pp))
				return fail(err, lineno, "pp rank outside 0..%u", hdr->pp - 1);
			if (parse_u32(tok[5], hdr->dp - 1, &e.dp))
				return fail(err, lineno, "dp rank outside 0..%u", hdr->dp - 1);
			if (ntok == 7 && parse_u32(tok[6], hdr->cp - 1, &e.cp))
				return fail(err, lineno, "cp rank outside 0..%u", hdr->cp - 1);
			next_rank++;
			if (e.local_rank == local_rank && strcmp(tok[1], node) == 0) {
				if (found)
					return fail(err, lineno,
						    "node %s local rank %u listed twice", node,
						    local_rank);
				*out = e;
				found = 1;
			}
		}
	}
	if (lineno == 0)
		return fail(err, 0, "empty file");
	if (!in_ranks)
		return fail(err, lineno, "no \"ranks\" line");
	if (next_rank != hdr->world_size)
		return fail(err, lineno, "%u ranks listed, world_size is %u", next_rank,
			    hdr->world_size);
	if (!found)
		return fail(err, 0, "no rank for node %s local rank %u", node, local_rank);
	return 0;
}

#define NAME_SLOT (ARNOLD_MAX_NAME + 1)

/* One host or one bracket expression "prefix[ranges]suffix" of `n` bytes at `item`. */
static long expand_item(const char *item, size_t n, char *names, size_t max, size_t count,
			struct arnold_error *err)
{
	const char *open = memchr(item, '[', n);
	const char *close;
	const char *p;
	size_t pre, suf;

	if (!open) {
		if (!valid_name(item, n))
			return fail(err, 0, "bad host name in node list");
		if (count == max)
			return fail(err, 0, "node list has more than %zu hosts", max);
		memcpy(names + count * NAME_SLOT, item, n);
		names[count * NAME_SLOT + n] = '\0';
		return (long)count + 1;
	}
	close = memchr(open, ']', n - (size_t)(open - item));
	if (!close || memchr(close + 1, '[', n - (size_t)(close + 1 - item)) ||
	    memchr(close + 1, ']', n - (size_t)(close + 1 - item)))
		return fail(err, 0, "node list: one bracket group per host name is understood");
	pre = (size_t)(open - item);
	suf = n - (size_t)(close + 1 - item);
	p = open + 1;
	if (p == close)
		return fail(err, 0, "node list: empty brackets");
	while (p < close) {
		const char *q = p, *dash = NULL, *end;
		unsigned long lo, hi, v;
		size_t width, digits;
		char num[16];

		while (q < close && *q != ',') {
			if (*q == '-' && !dash)
				dash = q;
			else if (*q < '0' || *q > '9')
				return fail(err, 0, "node list: bad range inside brackets");
			q++;
		}
		end = dash ? dash : q;
		width = (size_t)(end - p);
		if (width == 0 || width > 9 || (dash && (q - dash - 1 == 0 || q - dash - 1 > 9)))
			return fail(err, 0, "node list: bad range inside brackets");
		memcpy(num, p, width);
		num[width] = '\0';
		lo = strtoul(num, NULL, 10);
		hi = lo;
		if (dash) {
			digits = (size_t)(q - dash - 1);
			memcpy(num, dash + 1, digits);
			num[digits] = '\0';
			hi = strtoul(num, NULL, 10);
		}
		if (hi < lo || hi - lo >= max)
			return fail(err, 0, "node list: bad range inside brackets");
		for (v = lo; v <= hi; v++) {
			char *dst;
			int w;

			if (count == max)
				return fail(err, 0, "node list has more than %zu hosts", max);
			w = snprintf(num, sizeof(num), "%0*lu", (int)width, v);
			if (w < 0 || pre + (size_t)w + suf > ARNOLD_MAX_NAME)
				return fail(err, 0, "bad host name in node list");
			dst = names + count * NAME_SLOT;
			memcpy(dst, item, pre);
			memcpy(dst + pre, num, (size_t)w);
			memcpy(dst + pre + (size_t)w, close + 1, suf);
			dst[pre + (size_t)w + suf] = '\0';
			if (!valid_name(dst, pre + (size_t)w + suf))
				return fail(err, 0, "bad host name in node list");
			count++;
		}
		p = q < close ? q + 1 : q;
		if (q < close && p == close)
			return fail(err, 0, "node list: bad range inside brackets");
	}
	return (long)count;
}

long arnold_hostlist_expand(const char *list, char *names, size_t max,
			    struct arnold_error *err)
{
	size_t len = strnlen(list, ARNOLD_MAX_NODELIST + 1), start = 0, i, depth = 0;
	long count = 0;

	err->line = 0;
	err->message[0] = '\0';
	if (len == 0 || len > ARNOLD_MAX_NODELIST)
		return fail(err, 0, "node list empty or longer than %d bytes", ARNOLD_MAX_NODELIST);
	for (i = 0; i <= len; i++) {
		char c = i < len ? list[i] : ',';

		if (c == '[')
			depth++;
		else if (c == ']') {
			if (depth == 0)
				return fail(err, 0, "node list: unbalanced brackets");
			depth--;
		} else if (c == ',' && depth == 0) {
			if (i == start)
				return fail(err, 0, "node list: empty host name");
			count = expand_item(list + start, i - start, names, max, (size_t)count, err);
			if (count < 0)
				return -1;
			start = i + 1;
		}
	}
	if (depth != 0)
		return fail(err, 0, "node list: unbalanced brackets");
	return count;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

int arnold_rankorder_nodes_match(const char *buf, size_t len, const char *nodelist,
				 struct arnold_error *err)
{
	char *names = malloc((size_t)ARNOLD_MAX_NODES * NAME_SLOT);
	unsigned char *seen;
	long count, k;
	size_t pos = 0;
	int in_ranks = 0, rc = 0;

	if (!names)
		return fail(err, 0, "out of memory");
	count = arnold_hostlist_expand(nodelist, names, ARNOLD_MAX_NODES, err);
	if (count < 0) {
		free(names);
		return -1;
	}
	qsort(names, (size_t)count, NAME_SLOT, cmp_name);
	for (k = 1; k < count; k++)
		if (strcmp(names + (size_t)(k - 1) * NAME_SLOT, names + (size_t)k * NAME_SLOT) == 0) {
			fail(err, 0, "node list names %s twice", names + (size_t)k * NAME_SLOT);
			free(names);
			return -1;
		}
	seen = calloc((size_t)count + 1, 1);
	if (!seen) {
		free(names);
		return fail(err, 0, "out of memory");
	}
	while (pos < len && rc == 0) {
		const char *line = buf + pos, *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - line) : len - pos;
		char node[NAME_SLOT];
		const char *sp, *sp2;
		void *hit;

		pos += n + 1;
		if (!in_ranks) {
			in_ranks = n == 5 && memcmp(line, "ranks", 5) == 0;
			continue;
		}
		if (n == 0 || line[0] == '#')
			continue;
		sp = memchr(line, ' ', n);
		sp2 = sp ? memchr(sp + 1, ' ', n - (size_t)(sp + 1 - line)) : NULL;
		if (!sp || !sp2 || (size_t)(sp2 - sp - 1) > ARNOLD_MAX_NAME) {
			rc = fail(err, 0, "rank line without a node name");
			break;
		}
		memcpy(node, sp + 1, (size_t)(sp2 - sp - 1));
		node[sp2 - sp - 1] = '\0';
		hit = bsearch(node, names, (size_t)count, NAME_SLOT, cmp_name);
		if (!hit)
			rc = fail(err, 0, "node %s is not in the job's allocation: the file was made "
				  "for other nodes", node);
		else
			seen[((char *)hit - names) / NAME_SLOT] = 1;
	}
	for (k = 0; rc == 0 && k < count; k++)
		if (!seen[k])
			rc = fail(err, 0, "node %s of the job's allocation has no rank in the file: "
				  "the file was made for other nodes", names + (size_t)k * NAME_SLOT);
	free(seen);
	free(names);
	return rc;
}
