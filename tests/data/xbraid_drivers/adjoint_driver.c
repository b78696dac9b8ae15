/* A small XBraid_Adjoint program (written for braidpy's tests, not part of XBraid) on the
 * optimization problem of XBraid's ex-01-optimization, with the tolerances and iteration
 * limits on the command line, so that the adjoint can be run to convergence and its
 * objective and gradient printed in full precision.
 *
 * Problem (ex-01-optimization's): u' = lambda u on [0, ntime/2], ntime backward Euler
 * steps u <- u / (1 - lambda dt), u(0) = 1, guess 0.456; S = sum over every time point of
 * u^2 / ntime (ObjectiveT), J = F(S) = (S - target)^2 / 2 + gamma/2 lambda^2
 * (PostprocessObjective), F'(S) = S - target, and the regularization's derivative
 * gamma lambda is the gradient's starting value (PostprocessObjective_diff);
 * steepest descent lambda <- lambda - stepsize dJ/dlambda.
 *
 * Build (XBraid built in XBRAID):
 *   mpicc -O2 -I$XBRAID/braid adjoint_driver.c -o adjoint_driver $XBRAID/braid/libbraid.a -lm
 * Options: -nt N  -ml L  -cf C  -mi I  -tol T  -tola T (adjoint)  -oi K (optimization
 *          iterations, default 1)  -design LAMBDA
 * Prints, per optimization iteration k from rank 0:
 *   "k K objective %.17e gradient %.17e"  (gradient summed over ranks)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

typedef struct _braid_App_struct {
  double design, gradient, target, gamma;
} my_App;

typedef struct _braid_Vector_struct {
  double value;
} my_Vector;

static int my_Step(braid_App app, braid_Vector ustop, braid_Vector fstop, braid_Vector u,
                   braid_StepStatus status) {
  double tstart, tstop;
  braid_StepStatusGetTstartTstop(status, &tstart, &tstop);
  u->value = 1. / (1. - app->design * (tstop - tstart)) * (u->value);
  return 0;
}

static int my_Init(braid_App app, double t, braid_Vector *u_ptr) {
  my_Vector *u = malloc(sizeof(my_Vector));
  u->value = (t == 0.0) ? 1.0 : 0.456;
  *u_ptr = u;
  return 0;
}

static int my_Clone(braid_App app, braid_Vector u, braid_Vector *v_ptr) {
  my_Vector *v = malloc(sizeof(my_Vector));
  v->value = u->value;
  *v_ptr = v;
  return 0;
}

static int my_Free(braid_App app, braid_Vector u) {
  free(u);
  return 0;
}

static int my_Sum(braid_App app, double alpha, braid_Vector x, double beta, braid_Vector y) {
  y->value = alpha * (x->value) + beta * (y->value);
  return 0;
}

static int my_SpatialNorm(braid_App app, braid_Vector u, double *norm_ptr) {
  *norm_ptr = sqrt((u->value) * (u->value));
  return 0;
}

static int my_Access(braid_App app, braid_Vector u, braid_AccessStatus astatus) { return 0; }

static int my_BufSize(braid_App app, int *size_ptr, braid_BufferStatus bstatus) {
  *size_ptr = sizeof(double);
  return 0;
}

static int my_BufPack(braid_App app, braid_Vector u, void *buffer, braid_BufferStatus bstatus) {
  ((double *)buffer)[0] = u->value;
  braid_BufferStatusSetSize(bstatus, sizeof(double));
  return 0;
}

static int my_BufUnpack(braid_App app, void *buffer, braid_Vector *u_ptr,
                        braid_BufferStatus bstatus) {
  my_Vector *u = malloc(sizeof(my_Vector));
  u->value = ((double *)buffer)[0];
  *u_ptr = u;
  return 0;
}

static int my_ObjectiveT(braid_App app, braid_Vector u, braid_ObjectiveStatus ostatus,
                         double *obj_ptr) {
  int ntime;
  braid_ObjectiveStatusGetNTPoints(ostatus, &ntime);
  *obj_ptr = 1. / ntime * (u->value) * (u->value);
  return 0;
}

static int my_ObjectiveT_diff(braid_App app, braid_Vector u, braid_Vector u_bar, double F_bar,
                              braid_ObjectiveStatus ostatus) {
  int ntime;
  braid_ObjectiveStatusGetNTPoints(ostatus, &ntime);
  u_bar->value = 2. / ntime * (u->value) * F_bar;
  return 0;
}

static int my_Post(braid_App app, double sum, double *post_ptr) {
  *post_ptr = 1. / 2. * pow(sum - app->target, 2) + app->gamma / 2. * pow(app->design, 2);
  return 0;
}

static int my_Post_diff(braid_App app, double sum, double *F_bar_ptr) {
  *F_bar_ptr = sum - app->target;
  app->gradient = app->gamma * app->design;
  return 0;
}

static int my_Step_diff(braid_App app, braid_Vector ustop, braid_Vector u, braid_Vector ustop_bar,
                        braid_Vector u_bar, braid_StepStatus status) {
  double tstart, tstop, dt;
  braid_StepStatusGetTstartTstop(status, &tstart, &tstop);
  dt = tstop - tstart;
  app->gradient += (dt * (u->value)) / pow(1. - dt * app->design, 2) * (u_bar->value);
  u_bar->value = 1. / (1. - app->design * dt) * (u_bar->value);
  return 0;
}

static int my_ResetGradient(braid_App app) {
  app->gradient = 0.0;
  return 0;
}

int main(int argc, char *argv[]) {
  braid_Core core;
  my_App app;
  int rank, ntime = 50, max_levels = 2, cfactor = 2, max_iter = 10, oiter = 1, arg, k;
  double tol = 1e-6, tola = 1e-6, objective, mygrad;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  app.design = -1.0;
  app.gradient = 0.0;
  app.target = 1.15231184218078e-01;
  app.gamma = 0.0005;
  for (arg = 1; arg < argc; arg++) {
    if (!strcmp(argv[arg], "-nt")) ntime = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-ml")) max_levels = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-cf")) cfactor = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-mi")) max_iter = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-tol")) tol = atof(argv[++arg]);
    else if (!strcmp(argv[arg], "-tola")) tola = atof(argv[++arg]);
    else if (!strcmp(argv[arg], "-oi")) oiter = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-design")) app.design = atof(argv[++arg]);
    else {
      if (rank == 0) fprintf(stderr, "unknown option %s\n", argv[arg]);
      MPI_Finalize();
      return 1;
    }
  }
  braid_Init(MPI_COMM_WORLD, MPI_COMM_WORLD, 0.0, ntime / 2., ntime, &app, my_Step, my_Init,
             my_Clone, my_Free, my_Sum, my_SpatialNorm, my_Access, my_BufSize, my_BufPack,
             my_BufUnpack, &core);
  braid_InitAdjoint(my_ObjectiveT, my_ObjectiveT_diff, my_Step_diff, my_ResetGradient, &core);
  braid_SetPostprocessObjective(core, my_Post);
  braid_SetPostprocessObjective_diff(core, my_Post_diff);
  braid_SetMaxLevels(core, max_levels);
  braid_SetCFactor(core, -1, cfactor);
  braid_SetMaxIter(core, max_iter);
  braid_SetAccessLevel(core, 1);
  braid_SetPrintLevel(core, 0);
  braid_SetAbsTol(core, tol);
  braid_SetAbsTolAdjoint(core, tola);
  for (k = 0; k < oiter; k++) {
    braid_Drive(core);
    braid_GetObjective(core, &objective);
    mygrad = app.gradient;
    MPI_Allreduce(&mygrad, &app.gradient, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("k %d objective %.17e gradient %.17e\n", k, objective, app.gradient);
    app.design -= 6.0 * app.gradient;
  }
  braid_Destroy(core);
  MPI_Finalize();
  return 0;
}
