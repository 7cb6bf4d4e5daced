/* Runtime of the brr edge-profiling instrumentation (brr-instrument).
 *
 * Every instrumented translation unit puts a descriptor {counters, number of
 * sites, unit name} in the `brr_units` section; the linker brackets them with
 * __start_brr_units / __stop_brr_units. At exit the counts are written to the
 * file named by $BRR_EDGES (default brr-edges.txt), one line per site:
 *     UNIT SITE TAKEN FALLTHROUGH
 * Build with -DBRR_INTERVAL=N for the counter variant's initial countdown. */
#include <stdio.h>
#include <stdlib.h>

#ifndef BRR_INTERVAL
#define BRR_INTERVAL 1
#endif

struct brr_unit {
	unsigned long *counts;
	unsigned long sites;
	const char *name;
};

/* The global countdown of counter-based sampling (the paper's Figure 1). */
long __brr_countdown = BRR_INTERVAL;

extern struct brr_unit __start_brr_units[] __attribute__((weak));
extern struct brr_unit __stop_brr_units[] __attribute__((weak));

__attribute__((destructor)) static void brr_write_edges(void)
{
	const char *path = getenv("BRR_EDGES");
	FILE *f = fopen(path ? path : "brr-edges.txt", "w");
	if (!f) {
		perror("brr edge runtime: cannot open the output file");
		return;
	}
	for (struct brr_unit *u = __start_brr_units; u < __stop_brr_units; u++)
		for (unsigned long i = 0; i < u->sites; i++)
			fprintf(f, "%s %lu %lu %lu\n", u->name, i, u->counts[2 * i], u->counts[2 * i + 1]);
	fclose(f);
}
