#include "testlib.h"

int sg_test_passed, sg_test_failed;

int sg_test_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, sg_test_passed, sg_test_failed);
    return sg_test_failed ? 1 : 0;
}
