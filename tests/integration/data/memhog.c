/* Holds N MiB of written memory and prints their checksum every second, so a test can
   see that a checkpoint/restore kept every byte. Built static by the test itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    size_t words = mib * 1024 * 1024 / sizeof(uint64_t);
    uint64_t *memory = malloc(words * sizeof(uint64_t));
    if (memory == NULL) {
        perror("malloc");
        return 1;
    }
    uint64_t state = 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid();
    for (size_t i = 0; i < words; i++) {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        memory[i] = state;
    }
    for (unsigned long tick = 1;; tick++) {
        uint64_t sum = 0;
        for (size_t i = 0; i < words; i++) sum = sum * 31 + memory[i];
        printf("tick %lu sum %016llx\n", tick, (unsigned long long)sum);
        fflush(stdout);
        sleep(1);
    }
}
