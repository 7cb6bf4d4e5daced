/* Loads the plugin named by the first argument with dlopen, runs its work
 * for the CPU milliseconds of the second argument, and unloads it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu_time.h"

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    void *plugin = dlopen(argv[1], RTLD_NOW);
    if (!plugin) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    unsigned (*work)(unsigned, long) = (unsigned (*)(unsigned, long))dlsym(plugin, "plugin_work");
    if (!work)
        return 2;
    double budget = atof(argv[2]);
    unsigned x = 7;
    long rounds = 0;
    while (cpu_ms() < budget) {
        x = work(x, 100000);
        rounds++;
    }
    printf("plugin ran: %s\n", rounds > 0 ? "yes" : "no");
    return dlclose(plugin);
}
