/* Guarded file mappings (see mapguard.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/core/model/mapguard.h"

/* Written by add/remove under lock, read by the handler without it: a slot
 * is published by its base, stored last (and cleared first). */
struct slot {
	atomic_uintptr_t base;
	atomic_size_t len;
	_Atomic(atomic_int *) fault;
};

static struct slot slots[EXL_MAPGUARD_SLOTS];
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t page_size;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	uintptr_t addr = (uintptr_t)si->si_addr;

	(void)ctx;
	for (size_t i = 0; i < EXL_MAPGUARD_SLOTS; i++) {
		uintptr_t b = atomic_load_explicit(&slots[i].base, memory_order_acquire);
		size_t len = atomic_load_explicit(&slots[i].len, memory_order_relaxed);

		if (!b || addr < b || addr - b >= len)
			continue;
		/* From the faulting page to the end: one fault per truncation,
		 * not one per page of a large model. */
		uintptr_t page = addr & ~(page_size - 1);
		void *p = mmap((void *)page, b + len - page, PROT_READ,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);

		if (p == MAP_FAILED)
			break;
		atomic_store(atomic_load(&slots[i].fault), 1);
		return;
	}
	/* Not a guarded mapping: a real bug.  Returning re-runs the read,
	 * which faults again into the default action. */
	signal(sig, SIG_DFL);
}

/* Installs the handler unless it is in place already (under slots_mu).
 * Checked at every add, not once: whatever replaced it since (a test
 * framework, a library) would otherwise switch the guard off unseen. */
static int install(char *err, size_t errlen)
{
	struct sigaction sa, old;

	if (!sigaction(SIGBUS, NULL, &old) && (old.sa_flags & SA_SIGINFO) &&
	    old.sa_sigaction == on_sigbus)
		return 0;
	page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL)) {
		snprintf(err, errlen, "installing the SIGBUS handler: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int exl_mapguard_add(const void *base, size_t len, atomic_int *fault, char *err, size_t errlen)
{
	pthread_mutex_lock(&slots_mu);
	if (install(err, errlen)) {
		pthread_mutex_unlock(&slots_mu);
		return -1;
	}
	for (size_t i = 0; i < EXL_MAPGUARD_SLOTS; i++) {
		if (atomic_load(&slots[i].base))
			continue;
		atomic_store(&slots[i].len, len);
		atomic_store(&slots[i].fault, fault);
		atomic_store_explicit(&slots[i].base, (uintptr_t)base, memory_order_release);
		pthread_mutex_unlock(&slots_mu);
		return 0;
	}
	pthread_mutex_unlock(&slots_mu);
	snprintf(err, errlen, "more than %d model files mapped at once", EXL_MAPGUARD_SLOTS);
	return -1;
}

void exl_mapguard_remove(const void *base)
{
	pthread_mutex_lock(&slots_mu);
	for (size_t i = 0; i < EXL_MAPGUARD_SLOTS; i++)
		if (atomic_load(&slots[i].base) == (uintptr_t)base)
			atomic_store(&slots[i].base, 0);
	pthread_mutex_unlock(&slots_mu);
}
