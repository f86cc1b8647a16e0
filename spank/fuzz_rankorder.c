/*
 * libFuzzer harness for the rank-order parser (`make -C spank fuzz`). The first input byte
 * picks the local rank and the node looked up, so lookups that hit, miss and collide are all
 * explored; the rest is the file. Built with ASan and UBSan: any out-of-bounds read, overflow
 * or undefined behaviour on any input is a crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rankorder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const nodes[] = {"n001", "n002", "n016", "node-a.b_c"};
	struct arnold_header hdr;
	struct arnold_entry entry;
	struct arnold_error err;
	uint8_t pick;

	if (size == 0)
		return 0;
	pick = data[0];
	memset(&err, 0, sizeof(err));
	if (arnold_rankorder_lookup((const char *)data + 1, size - 1, nodes[pick & 3],
				    (uint32_t)(pick >> 2), &hdr, &entry, &err) == 0)
		(void)arnold_rankorder_nodes_match((const char *)data + 1, size - 1,
						   "n[001-002,016],node-a.b_c", &err);
	/* The same bytes as a node list expression. */
	{
		static char list[4097];
		static char names[64 * (ARNOLD_MAX_NAME + 1)];
		size_t n = size - 1 < sizeof(list) - 1 ? size - 1 : sizeof(list) - 1;

		memcpy(list, data + 1, n);
		list[n] = '\0';
		(void)arnold_hostlist_expand(list, names, 64, &err);
	}
	/* The message is always a terminated string. */
	if (memchr(err.message, '\0', sizeof(err.message)) == NULL)
		__builtin_trap();
	return 0;
}
