// aten::digamma
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>) -> (tensor<4xf32>) {
    %1 = "chlo.digamma"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "stablehlo.constant"() {value = dense<-1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %4 = "stablehlo.divide"(%3, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %5 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %6 = "stablehlo.broadcast_in_dim"(%5) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %7 = "stablehlo.compare"(%0, %6) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %8 = "stablehlo.select"(%7, %4, %1) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%8) : (tensor<4xf32>) -> ()
  }
}
// aten::polygamma
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>) -> (tensor<4xf32>) {
    %1 = "stablehlo.constant"() {value = dense<2.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %2 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %3 = "chlo.zeta"(%2, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %4 = "stablehlo.constant"() {value = dense<1.60000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %6 = "stablehlo.add"(%0, %5) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %7 = "chlo.zeta"(%2, %6) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %8 = "stablehlo.negate"(%2) : (tensor<4xf32>) -> tensor<4xf32>
    %9 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %10 = "stablehlo.broadcast_in_dim"(%9) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %11 = "stablehlo.add"(%0, %10) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %12 = "stablehlo.power"(%11, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %13 = "stablehlo.add"(%7, %12) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %14 = "stablehlo.constant"() {value = dense<1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %15 = "stablehlo.broadcast_in_dim"(%14) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %16 = "stablehlo.add"(%0, %15) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %17 = "stablehlo.power"(%16, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %18 = "stablehlo.add"(%13, %17) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %19 = "stablehlo.constant"() {value = dense<2.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %20 = "stablehlo.broadcast_in_dim"(%19) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %21 = "stablehlo.add"(%0, %20) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %22 = "stablehlo.power"(%21, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %23 = "stablehlo.add"(%18, %22) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %24 = "stablehlo.constant"() {value = dense<3.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %25 = "stablehlo.broadcast_in_dim"(%24) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %26 = "stablehlo.add"(%0, %25) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %27 = "stablehlo.power"(%26, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %28 = "stablehlo.add"(%23, %27) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %29 = "stablehlo.constant"() {value = dense<4.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %30 = "stablehlo.broadcast_in_dim"(%29) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %31 = "stablehlo.add"(%0, %30) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %32 = "stablehlo.power"(%31, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %33 = "stablehlo.add"(%28, %32) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %34 = "stablehlo.constant"() {value = dense<5.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %35 = "stablehlo.broadcast_in_dim"(%34) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %36 = "stablehlo.add"(%0, %35) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %37 = "stablehlo.power"(%36, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %38 = "stablehlo.add"(%33, %37) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %39 = "stablehlo.constant"() {value = dense<6.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %40 = "stablehlo.broadcast_in_dim"(%39) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %41 = "stablehlo.add"(%0, %40) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %42 = "stablehlo.power"(%41, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %43 = "stablehlo.add"(%38, %42) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %44 = "stablehlo.constant"() {value = dense<7.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %45 = "stablehlo.broadcast_in_dim"(%44) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %46 = "stablehlo.add"(%0, %45) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %47 = "stablehlo.power"(%46, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %48 = "stablehlo.add"(%43, %47) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %49 = "stablehlo.constant"() {value = dense<8.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %50 = "stablehlo.broadcast_in_dim"(%49) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %51 = "stablehlo.add"(%0, %50) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %52 = "stablehlo.power"(%51, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %53 = "stablehlo.add"(%48, %52) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %54 = "stablehlo.constant"() {value = dense<9.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %55 = "stablehlo.broadcast_in_dim"(%54) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %56 = "stablehlo.add"(%0, %55) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %57 = "stablehlo.power"(%56, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %58 = "stablehlo.add"(%53, %57) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %59 = "stablehlo.constant"() {value = dense<1.00000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %60 = "stablehlo.broadcast_in_dim"(%59) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %61 = "stablehlo.add"(%0, %60) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %62 = "stablehlo.power"(%61, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %63 = "stablehlo.add"(%58, %62) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %64 = "stablehlo.constant"() {value = dense<1.10000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %65 = "stablehlo.broadcast_in_dim"(%64) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %66 = "stablehlo.add"(%0, %65) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %67 = "stablehlo.power"(%66, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %68 = "stablehlo.add"(%63, %67) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %69 = "stablehlo.constant"() {value = dense<1.20000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %70 = "stablehlo.broadcast_in_dim"(%69) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %71 = "stablehlo.add"(%0, %70) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %72 = "stablehlo.power"(%71, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %73 = "stablehlo.add"(%68, %72) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %74 = "stablehlo.constant"() {value = dense<1.30000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %75 = "stablehlo.broadcast_in_dim"(%74) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %76 = "stablehlo.add"(%0, %75) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %77 = "stablehlo.power"(%76, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %78 = "stablehlo.add"(%73, %77) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %79 = "stablehlo.constant"() {value = dense<1.40000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %80 = "stablehlo.broadcast_in_dim"(%79) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %81 = "stablehlo.add"(%0, %80) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %82 = "stablehlo.power"(%81, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %83 = "stablehlo.add"(%78, %82) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %84 = "stablehlo.constant"() {value = dense<1.50000000000000000e+01> : tensor<f32>} : () -> tensor<f32>
    %85 = "stablehlo.broadcast_in_dim"(%84) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %86 = "stablehlo.add"(%0, %85) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %87 = "stablehlo.power"(%86, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %88 = "stablehlo.add"(%83, %87) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %89 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %90 = "stablehlo.broadcast_in_dim"(%89) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %91 = "stablehlo.compare"(%0, %90) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %92 = "stablehlo.select"(%91, %88, %3) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %93 = "stablehlo.constant"() {value = dense<1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %94 = "stablehlo.broadcast_in_dim"(%93) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %95 = "stablehlo.multiply"(%94, %92) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %96 = "stablehlo.constant"() {value = dense<0x7F800000> : tensor<f32>} : () -> tensor<f32>
    %97 = "stablehlo.broadcast_in_dim"(%96) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %98 = "stablehlo.constant"() {value = dense<3.14159265358979312e+00> : tensor<f32>} : () -> tensor<f32>
    %99 = "stablehlo.broadcast_in_dim"(%98) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %100 = "stablehlo.multiply"(%99, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %101 = "stablehlo.sine"(%100) : (tensor<4xf32>) -> tensor<4xf32>
    %102 = "stablehlo.multiply"(%101, %101) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %103 = "stablehlo.constant"() {value = dense<9.86960440108935799e+00> : tensor<f32>} : () -> tensor<f32>
    %104 = "stablehlo.broadcast_in_dim"(%103) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %105 = "stablehlo.divide"(%104, %102) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %106 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %107 = "stablehlo.broadcast_in_dim"(%106) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %108 = "stablehlo.compare"(%0, %107) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %109 = "stablehlo.select"(%108, %97, %105) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %110 = "stablehlo.floor"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    %111 = "stablehlo.compare"(%0, %110) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %112 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %113 = "stablehlo.broadcast_in_dim"(%112) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %114 = "stablehlo.compare"(%0, %113) {comparison_direction = #stablehlo<comparison_direction LE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %115 = "stablehlo.and"(%114, %111) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %116 = "stablehlo.select"(%115, %109, %95) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%116) : (tensor<4xf32>) -> ()
  }
}
