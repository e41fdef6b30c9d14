#include "testlib.h"

#include <stdlib.h>

int sg_test_passed, sg_test_failed;

int sg_test_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, sg_test_passed, sg_test_failed);
    return sg_test_failed ? 1 : 0;
}

const char *sg_test_model(const char *file)
{
    static char buf[4096];
    const char *dir = getenv("SEGRT_MODELS");
    if (!dir || !dir[0]) {
        fprintf(stderr, "SEGRT_MODELS is not set: it names the folder of the test models, which "
                        "`python tests/models/make_models.py DIR` writes (ctest runs it as the test "
                        "models.generate, into the build's test-models/, and sets SEGRT_MODELS)\n");
        exit(1);
    }
    snprintf(buf, sizeof buf, "%s/%s", dir, file);
    return buf;
}
